"""Routing compiled for the API server: the webhook's routing and steering of plain GPU pods
written as a MutatingAdmissionPolicy (``routing``), so pods are routed while every gpupool
replica is down, and the canary pods that prove the compiled policy on the API server before
it routes any (``canary``). Beside admission, whose answer it compiles and is held to.

May import: webhook.api, core, stacks, view, pod, placement, checks, access, admission, wording.
"""
