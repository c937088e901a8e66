"""The `recon` subcommands, one module per area; each registers itself on ``recon.cli.cli`` when imported."""
