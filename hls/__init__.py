"""Package data for a planned HLS C++ backend: nothing here yet but README.md (see it for the plan)."""
