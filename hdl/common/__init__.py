"""Building blocks shared by every fabric: flits, credit links, arbiters, switches.

The blocks are clocked by ``sync`` and count cycles of it; the fabric that
places a block gives ``sync`` its clock, or renames it with
``DomainRenamer``: the SM clock in the Hopper GPC (seed 000), the minion
clock (600 MHz) or the mesh clock (400 MHz) in the ET-SoC-1 (seed 002),
the 1 GHz model clock in the PCIe machine (seed 001).
"""
