"""Stand-ins for what runs inside the containers of an emulated GKE workload."""
