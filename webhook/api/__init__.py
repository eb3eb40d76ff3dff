"""Formats shared by both sides of the cluster: what the node agent publishes and the engine
reads. The only gpupool package the engine may import besides itself."""
