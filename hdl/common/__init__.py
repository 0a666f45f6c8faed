"""Building blocks shared by every fabric: flits, credit links, arbiters, switches."""
