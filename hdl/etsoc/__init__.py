"""ET-SoC-1 on-chip network (seed 002): mesh routers, shires, TensorSend engines."""
