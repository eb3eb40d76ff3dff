"""What the test suite and the benchmarks both drive: the webhook served over HTTPS, its
certificates, admission reviews, node layouts, and the real programs built from their Go
modules (a control plane, helm, HAMi). It imports nothing from ``tests/`` or ``bench/``;
``tests/unit/test_layers.py`` holds it, and both of them, to that.
"""
