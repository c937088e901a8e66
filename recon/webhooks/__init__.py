"""Webhooks: the PSPs' events heard the moment they are known (``intake``: verify with the PSP's receiver and
store, in the request; ``recon.reconcile.webhook``: apply, in a job), beside reconciliation's polling, never
instead of it."""
