"""Who may reach GPUs at all: containers without a GPU grant kept from the devices a node
would hand them anyway (``grants``), and HAMi's scheduler-owned allocation kept to the
identities that own it (``schedulerstate``). docs/security.md has the threat model.

May import: webhook.api, core, stacks, view, pod, wording.
"""
