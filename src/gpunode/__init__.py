"""gpunode: the CLI around the mlplatform.gpunode collection (simulated fleet, hook, report)."""

__version__ = "0.1.0"
