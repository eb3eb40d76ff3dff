"""The shells' reach into the cluster: ``kube`` (the one way every shell reaches the API
server: clients, sources, the server's version), ``watch`` (the informer that keeps the
engine's cluster view current from watches), ``routingpolicy`` (routing in the API server
kept installed, proved by its canary pods first).

May import: webhook.api, webhook.engine (its declared surface).
"""
