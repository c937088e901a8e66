"""``recon console``: the web console, server-rendered on Starlette and Jinja2 under uvicorn.

``server`` builds the application and serves it, ``security`` keeps it safe (token, CSRF, headers),
``web`` is the request plumbing (templates, pages, forms, errors), ``charts`` draws inline SVG, and
``pages/`` holds one module per area. Every read and write goes through the ``recon.app.App``.
"""
