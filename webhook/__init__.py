"""gpupool: routes GPU pods to the scheduler of their node pool and stops pods whose nodes
cannot resolve the CDI devices they will need."""

__version__ = "0.1.0"
