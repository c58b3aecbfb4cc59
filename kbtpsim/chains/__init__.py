"""The chain compiler: KBTP data operations as pre-posted chains of RDMA work requests.

Modules (docs/chains.md has the designs, tables and measurements):

* :mod:`~kbtpsim.chains.ir` -- the chain IR: WR templates in a ``networkx`` graph, every
  field with a declared source (constant, address, or placed at run time by the receive,
  a table/ring Read, an atomic or a patch), edges for the orderings the NIC enforces;
* :mod:`~kbtpsim.chains.verify` -- the verifier (placed-before-use, held-back WQEs,
  byte order, capabilities), each violation naming the WR, the field and the rule;
* :mod:`~kbtpsim.chains.compiler` -- the per-credit chain: the builder, its step
  sequence and fences; with :mod:`~kbtpsim.chains.vocab` (request layout, constants, the
  fast-path variants ``load``, ``store_inline``, ``store_read``, ``alloc_inline``,
  ``alloc_read``), :mod:`~kbtpsim.chains.variants` (each variant's WRs) and
  :mod:`~kbtpsim.chains.lowering` (conditions as CAS-on-WQE, for cx5);
* :mod:`~kbtpsim.chains.plan` -- per profile and byte order, which variants are offloaded
  (their chain verifies) and why the others go to the CPU;
* :mod:`~kbtpsim.chains.post` -- :class:`ChainServer`, posting chains on the NIC model
  (with :mod:`~kbtpsim.chains.wr_build`: a template's fields resolved for one credit);
* :mod:`~kbtpsim.chains.harness` -- initiator NIC + target NIC + CPU model + reference;
* :mod:`~kbtpsim.chains.measure`, :mod:`~kbtpsim.chains.render`, :mod:`~kbtpsim.chains.cli`.

Pre-posting API (for the offloaded target server)::

    layout = ChainLayout.of(target_layout, config)        # target_layout: TargetLayout
    table_key, pool_key = layout.register(nic)            # strided table key, pool MR
    plan = plan_connection(nic.profile, config, layout, initiator_name)
    ring = register_ring(nic, target_layout.rings[0])     # only if ALLOC_STORE offloaded
    server = ChainServer(nic, plan.chain, layout, credits, table_key, pool_key, ring=ring)
    connect(initiator_qp, server.conn)                    # the connection's QP
    ...
    for f in server.poll(now):          # (b) which credits finished, in request order
        if f.needs_cpu:                 # no fast path served it: the CPU must
            effects = (cpu_target.finish_allocation(conn_id, f.request, f.ticket, now)
                       if f.ticket is not None   # ALLOC_STORE: the chain took a ticket
                       else cpu_target.handle(conn_id, f.request, now))
            ...                         # carry out effects (the harness uses a 2nd QP)
            ...                         # session / quota octets of later credits:
            ...                         # server.set_session, server.arm, server.disarm
            server.release(f.credit)    # let the next credit's chain run
        elif f.ticket is not None:      # the chain bound a handle: bookkeeping
            effects = cpu_target.note_chain_alloc(conn_id, f.request, f.ticket, now)
    server.alloc_budget = quota - usage - len(server.armed_credits())
    server.refill()                     # (c) re-post every finished credit, one doorbell

(a) ``ChainServer(..., credits=N)`` pre-posts N chains, one per request credit (advertise
N as Request Credits); credits are numbered 0, 1, 2, ... per connection and their chains
run strictly in order (each waits for the previous credit's *gate* NOP, which the fast path
ENABLEs itself and :meth:`ChainServer.release` ENABLEs after a fallback), so requests of a
connection complete in order whoever serves them. The CPU fallback hook is therefore:
poll, serve ``Finished.request`` with a memory-backed ``Target`` on the same memory, call
``release``. ``ChainServer.wrs_posted`` and ``doorbells`` count the refill work.
"""

from kbtpsim.chains.compiler import OPERATIONS, VARIANTS, Geometry, build_chain
from kbtpsim.chains.ir import Chain, WrTemplate
from kbtpsim.chains.layout import ChainLayout, RingKeys, aligned_block, register_ring
from kbtpsim.chains.plan import ConnectionPlan, Decision, decide, decide_op, plan_connection
from kbtpsim.chains.post import ChainServer, Finished
from kbtpsim.chains.verify import ChainRejected, Violation, check, verify

__all__ = [
    "OPERATIONS",
    "VARIANTS",
    "Chain",
    "ChainLayout",
    "ChainRejected",
    "ChainServer",
    "ConnectionPlan",
    "Decision",
    "Finished",
    "Geometry",
    "RingKeys",
    "Violation",
    "WrTemplate",
    "aligned_block",
    "build_chain",
    "check",
    "decide",
    "decide_op",
    "plan_connection",
    "register_ring",
    "verify",
]
