"""The terms every room of the engine speaks: the PoolPolicy, a Decision and its reason codes,
how objects are named in messages, JSON patches, a pod's resources, and taints.

May import: webhook.api.
"""
