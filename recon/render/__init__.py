"""Human output for the command line, one module per area, every string through ``output.PlainConsole``:
``output`` (the literal console, the shared table and formats, the progress bar), ``jobs``, ``payments``,
``stats``. Machine output (``--json``) never comes through here."""
