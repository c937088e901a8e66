"""Bank statements: ``config`` (``[bank]``: our accounts), ``importer`` (a statement file, validated, into the
store), ``entry_key`` (what makes an entry the same entry in two statements), ``rows`` (what the store returns).
The formats live in ``recon.bank.formats`` (one package each, one registry), which imports nothing else of recon."""
