"""``gpupool scan``: GPU pods re-checked after admission as the cluster changes under them,
reported where platform teams look (PolicyReports, Events, metrics).

A thin shell around the engine's ``recheck`` (one answer per pod, the admission decision of
the pod as stored): ``scanner`` keeps the answers and what changed, ``watch`` feeds it from
the API server, ``leader`` elects one writer, ``reports``, ``events`` and ``metrics`` say
what changed, and ``run`` wires them together.
"""
