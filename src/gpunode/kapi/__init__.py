"""A Kubernetes API emulator for tests: loopback HTTPS, stateful, the subset the roles use.

``gpunode kapi serve --port 16443 --state DIR`` runs it; ``gpunode.kapi.server.RunningServer`` runs it
in a thread for pytest. See ``store.py`` for what is emulated and what is not.
"""
