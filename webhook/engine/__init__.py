"""The policy engine: objects, a cluster view and a policy in, decisions out. Pure: no I/O.

Every shell (the admission server, ``gpupool check``, the doctor) enters through
``webhook.engine.admit``, so offline and online answers cannot drift. Nothing in this package
imports Flask, gunicorn, the Kubernetes client, the file system or another gpupool layer
except ``webhook.api`` (the formats shared with the node agent); ``tests/unit/test_layers.py``
enforces it.
"""
