"""What each GPU stack declares, read one object at a time, with no cluster around it:
HAMi's node register annotation and device-plugin DaemonSet, the GPU Operator's ClusterPolicy
and NRI plugin, GPU feature discovery's and the MIG manager's node labels, and DRA's
DeviceClasses, ResourceSlices and claims with their CEL selectors.

May import: webhook.api, core.
"""
