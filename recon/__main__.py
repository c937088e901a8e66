from recon.cli import main

main()
