"""The lease engine: jobs in the database, executed under fenced, heartbeated leases.

It knows nothing about payments: a job has a kind and a JSON payload, and the application registers a
handler per kind. The public names are re-exported from ``recon``.
"""
