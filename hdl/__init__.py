"""Amaranth RTL of the fabricsim interconnect models.

``hdl.common`` holds the pieces every fabric shares (flits, credit links,
arbiters, the credit switch, clock-domain crossings, watchdogs);
``hdl.hopper`` the Hopper GPC distributed shared memory fabric (seed 000);
``hdl.etsoc`` the ET-SoC-1 mesh of shires and minions (seed 002);
``hdl.pcie`` the two-socket, eight-GPU PCIe machine (seed 001).
"""
