"""Webhooks: the PSPs' events heard the moment they are known (``intake``: verify and store, in the request;
``handler``: apply, in a job), beside reconciliation's polling, never instead of it."""
