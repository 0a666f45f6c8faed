"""Amaranth RTL of the fabricsim interconnect models.

``hdl.common`` holds the pieces every fabric shares (flits, credit links,
arbiters, the credit switch); ``hdl.hopper`` the Hopper GPC distributed
shared memory fabric.
"""
