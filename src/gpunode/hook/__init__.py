"""The post-provision hook: machines that MAAS or Cluster API deploy provision themselves.

``gpunode hook serve`` accepts cloud-init ``phone_home`` posts and JSON requests, records each one
in SQLite before answering, and a worker runs the pipeline playbook through ansible-runner for the
queued hosts (``worker``/``job``). ``gpunode hook run`` runs the same pipeline from a shell and
``gpunode hook status`` reports hosts and runs.
"""
