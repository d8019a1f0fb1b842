"""bitforge compiler: fixed-point types, IR, frontends, passes, golden model, backends, CLI."""
