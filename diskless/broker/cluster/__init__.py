"""The cluster: membership (broker sessions kept alive by heartbeats), the controller that
spreads partition leadership over live brokers, and what this broker learns of both."""
