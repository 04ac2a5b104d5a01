"""Tiering: pure decisions (policy.py), the uploader shell (uploader.py) and each partition's
remote log, its catalogue and reads (remote_log.py)."""
