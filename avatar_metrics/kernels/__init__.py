"""Pure numpy kernels: no Spark here, so every one is testable on its own."""
