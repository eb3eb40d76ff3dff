"""The shells' reach into files: ``policyfile`` (a PoolPolicy read from a file, or the
built-in one), ``snapshot`` (a cluster read from ``kubectl get -o yaml`` output), ``certs``
(the webhook's certificates issued and renewed).

May import: webhook.api, webhook.engine (its declared surface), webhook.cluster.
"""
