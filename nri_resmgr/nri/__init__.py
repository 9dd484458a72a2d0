"""The NRI side of the daemon: the wire (mux, ttrpc), and the plugin stub."""
