"""The node side: CDI spec parsing, spec-directory scanning, the NVIDIA runtime's config, and
the agent that publishes what it finds as the inventory annotation (``webhook.api``)."""
