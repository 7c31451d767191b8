"""PCIe distance between two simulated devices, in ``nvidia-smi topo -m`` terms (stdlib only).

Same rule as ``plugins/module_utils/nic_roles.pcie_distance_detail`` (discovery and the simulated
``topo -m`` must agree): below one host bridge, with C the deepest common bridge, both devices at
most 2 levels below C -> PIX, deeper -> PXB, no common bridge -> PHB; different host bridges:
NODE on one NUMA node, else SYS.
"""

from __future__ import annotations


def distance(a: dict, b: dict) -> str:
    chain_a, chain_b = a["parent_chain"], b["parent_chain"]
    if chain_a[0] == chain_b[0]:
        br_a, br_b = chain_a[1:], chain_b[1:]
        common = 0
        while common < min(len(br_a), len(br_b)) and br_a[common] == br_b[common]:
            common += 1
        if common == 0:
            return "PHB"
        return "PIX" if max(len(br_a) - common + 1, len(br_b) - common + 1) <= 2 else "PXB"
    return "NODE" if a.get("numa_node") == b.get("numa_node") else "SYS"


def cpu_list(node: int, nodes: int, cores_per_node: int = 56) -> str:
    """CPU affinity of a NUMA node on a 2-thread-per-core machine numbered like Linux does
    (node n: cores n*C..(n+1)*C-1 and their SMT siblings). 56 cores per socket: inferred
    (Xeon Platinum 8480C of the DGX H100)."""
    first = node * cores_per_node
    sibling = nodes * cores_per_node + first
    return f"{first}-{first + cores_per_node - 1},{sibling}-{sibling + cores_per_node - 1}"
