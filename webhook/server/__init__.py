"""The admission server: the AdmissionReview wire contract, one handler per path, audit,
metrics, certificate reload, the node watch and gunicorn wiring. A thin shell around
``webhook.engine``."""
