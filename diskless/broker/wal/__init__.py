"""Write-ahead objects: every acknowledged batch durable in the bucket (writer.py: group
commit; recovery.py: a partition's tail rebuilt from them at start-up)."""
