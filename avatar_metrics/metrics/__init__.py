"""One module per metric, each reading like its section of the spec."""
