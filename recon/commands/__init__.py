"""The `recon` subcommands, one module per area: plain click commands and groups, taking the App from
``ctx.obj``. ``recon.cli`` adds them to its group; nothing here imports it."""
