"""Bank statement formats, outside recon: ``protocol`` (what a format is), ``registry`` (name -> format), and
one package per format (camt053, mt940, bai2), none importing another and none importing recon."""
