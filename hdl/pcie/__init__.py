"""PCIe GPU-to-GPU copy fabric (seed 001)."""
