"""The console's pages, one module per area; each gives its ``ROUTES``."""
