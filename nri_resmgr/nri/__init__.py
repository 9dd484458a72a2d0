"""The NRI side of the daemon: the wire (mux, ttrpc), the plugin stub, and a runtime simulator."""
