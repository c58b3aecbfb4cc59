"""kbtpsim: a cycle-level simulator of KBTP targets offloaded to RDMA NICs."""

__version__ = "0.1.0"
