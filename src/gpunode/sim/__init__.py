"""The simulated DGX/HGX H100 fleet: hardware profiles, the sysfs materializer and podman hosts."""
