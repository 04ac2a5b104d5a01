"""Client quotas (KIP-13, KIP-55, KIP-124, KIP-546, KIP-599, KIP-612): entities and their
configs (entities.py), rates and throttle times (rate.py, client_quotas.py), what a request is
charged (enforcement.py) and where its throttle goes (throttling.py); the store shell
(configs.py)."""
