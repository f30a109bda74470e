// SPDX-License-Identifier: GPL-2.0
/*
 * devmem_nic: a software NIC for testing devmem TCP and io_uring zcrx.
 *
 * Test infrastructure of ncdevmem-rs (tests/vm/), written for that project.
 * It creates pairs of Ethernet netdevs linked back to back: what one side
 * transmits, the other side receives on the RX queue chosen by its ntuple
 * rules or, failing those, by its RSS indirection table (a rule may name an
 * additional RSS context, whose own table then picks the queue). Each netdev has a
 * platform device with a 64-bit DMA mask as parent, queue management ops and
 * one page pool per RX queue, so the networking core can install a memory
 * provider (a devmem dma-buf binding or an io_uring zcrx area) on a queue.
 *
 * The peer's TSO frames cross the link whole and arrive as one large frame
 * (as with hardware LRO), their payload in as many buffers as it needs.
 *
 * There is no DMA engine: the CPU writes each received payload into the
 * buffer at its DMA address. The test VM has no IOMMU, so a DMA address is a
 * physical address and the buffer is reached through the kernel's direct map.
 * See README.md beside this file for what is and is not emulated.
 *
 * Control (debugfs, mounted at /sys/kernel/debug):
 *   devmem_nic/new_pair   write "ID [QUEUES [nohds]]": creates dnic<ID>a and
 *                         dnic<ID>b, linked; QUEUES RX/TX queues each
 *                         (default: the module parameter "queues").
 *   devmem_nic/del_pair   write "ID": unregisters both netdevs of the pair.
 *   devmem_nic/<ifname-at-creation>/stats   per-RX-queue counters (text).
 *   devmem_nic/<ifname-at-creation>/fault_linear_bytes   driver fault: the
 *                         first N payload bytes of each split frame stay in
 *                         the linear part (the stack reports them as
 *                         SCM_DEVMEM_LINEAR).
 *   devmem_nic/<ifname-at-creation>/fault   write "KIND AFTER [N]": once
 *                         AFTER split frames went by, the next one gets the
 *                         fault KIND: stale (payload not written), swap (its
 *                         halves, two frags, swapped), dup (the previous
 *                         frame's payload again), corrupt (one byte flipped),
 *                         offset (a frag reported N bytes off), xflow
 *                         (the payload of the latest split frame, of
 *                         another flow: the fault waits for a frame that
 *                         follows a frame of another flow at least as
 *                         long). Read: the armed fault or what fired.
 * Module parameters: pairs (created at load, IDs 0..pairs-1), queues.
 */

#include <linux/debugfs.h>
#include <linux/dma-direct.h>
#include <linux/dma-mapping.h>
#include <linux/etherdevice.h>
#include <linux/ethtool.h>
#include <linux/ethtool_netlink.h>
#include <linux/if_vlan.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <net/dsfield.h>
#include <net/ip.h>
#include <net/ipv6.h>
#include <linux/module.h>
#include <linux/netdevice.h>
#include <linux/platform_device.h>
#include <linux/random.h>
#include <linux/rtnetlink.h>
#include <linux/seq_file.h>
#include <linux/skbuff.h>
#include <linux/tcp.h>
#include <linux/u64_stats_sync.h>
#include <linux/version.h>
#include <linux/udp.h>
#include <net/netdev_lock.h>
#include <net/netdev_queues.h>
#include <net/netdev_rx_queue.h>
#include <net/page_pool/helpers.h>

/*
 * Kernel API versions: this module follows the driver-facing APIs of the
 * newest Debian backports kernel (7.x: queue-config aware queue management
 * ops, netmem, ops-locked netdevs). Every version dependence lives here.
 */
#if LINUX_VERSION_CODE < KERNEL_VERSION(7, 0, 0)
#error "devmem_nic needs the 7.x queue management and netmem APIs"
#endif

#define DNIC_DRV_NAME		"devmem_nic"
#define DNIC_MAX_QUEUES		16
#define DNIC_INDIR_SIZE		128
#define DNIC_KEY_SIZE		40
#define DNIC_MAX_RULES		64
#define DNIC_MAX_RSS_CTX	8	/* context ids 1..7 (0 is the default table) */
#define DNIC_RING_DEFAULT	1024
#define DNIC_RING_MAX		4096
#define DNIC_HDS_THRESH_MAX	1024
#define DNIC_RX_PAGE_SIZE_MAX	SZ_64K

static unsigned int pairs = 1;
module_param(pairs, uint, 0444);
MODULE_PARM_DESC(pairs, "pairs created at load time (IDs 0..pairs-1)");

static unsigned int queues = 4;
module_param(queues, uint, 0444);
MODULE_PARM_DESC(queues, "RX and TX queues per netdev (1..16)");

/* Frame metadata from the transmitting side, kept in the skb's cb. */
struct dnic_cb {
	u32 hash;		/* RSS (Toeplitz) hash, 0 when none */
	u16 hdr_len;		/* L2+L3+L4 header bytes of a TCP frame, else 0 */
	u8 hash_l4;		/* the hash covers the ports */
	u8 l4;			/* a TCP or UDP frame (its checksum "verified") */
	u32 payload_len;	/* TCP payload bytes (from the IP length) */
};

#define DNIC_CB(skb) ((struct dnic_cb *)(skb)->cb)

/* What the parser learned of a frame's L3/L4 headers. */
struct dnic_flow {
	bool ipv6;
	u8 l4proto;		/* IPPROTO_TCP/UDP, else 0 (no ports) */
	bool ip;		/* IPv4 or IPv6 */
	__be32 src4, dst4;
	struct in6_addr src6, dst6;
	__be16 sport, dport;
	u8 tos;
	unsigned int hdr_len;	/* TCP only */
	unsigned int payload_len;
};

/* The receive classifier: RSS table and key, ntuple rules. Replaced whole
 * (RCU) on every change; read by the peer's transmit path.
 */
struct dnic_cls {
	struct rcu_head rcu;
	u32 indir[DNIC_INDIR_SIZE];
	u8 key[DNIC_KEY_SIZE];
	DECLARE_BITMAP(used, DNIC_MAX_RULES);
	struct ethtool_rx_flow_spec rules[DNIC_MAX_RULES];
	/* The RSS context of each FLOW_RSS rule. */
	u32 rule_ctx[DNIC_MAX_RULES];
	/* The tables of the additional RSS contexts, by context id (the
	 * ethtool core keeps the contexts themselves; entry 0 is unused).
	 */
	u32 ctx_indir[DNIC_MAX_RSS_CTX][DNIC_INDIR_SIZE];
	/* Flow types hashed on their addresses only (bits: dnic_hash_bit()),
	 * set with ethtool -N DEV rx-flow-hash; the rest hash the ports too.
	 */
	u8 hash_ip_only;
};

struct dnic_rxq_stats {
	u64 packets;		/* frames (a TSO frame of the peer is one) */
	u64 wire_packets;	/* the wire's packets: a TSO frame's segments */
	u64 bytes;
	u64 hw_drops;		/* ring full */
	u64 alloc_fail;		/* no buffer in the page pool (or no skb) */
	u64 split;		/* frames whose payload went to pool buffers */
	struct u64_stats_sync syncp;
};

struct dnic_priv;

struct dnic_rxq {
	struct dnic_priv *priv;
	unsigned int idx;
	struct napi_struct napi;
	struct sk_buff_head ring;	/* frames "on the wire" for this queue */
	bool peer_tx_stopped;
	/* Owned by NAPI (and by the queue ops while NAPI is disabled). */
	struct page_pool *pp;
	netmem_ref buf;			/* buffer being filled, driver's ref */
	unsigned int buf_off;
	unsigned int buf_size;		/* PAGE_SIZE << pool order */
	/* The dup fault: the payload of the frame before the faulty one; the
	 * xflow fault: that of the latest frame of another flow.
	 */
	u8 *last;
	unsigned int last_len;
	u32 fault_arg;
	/* The xflow fault that fired: the faulty frame's ports, and those of
	 * the flow whose payload it got (host order, for the report).
	 */
	u16 xflow_into[2], xflow_from[2];
	unsigned int fault_differ;	/* bytes the last fault changed */
	struct dnic_rxq_stats stats;
};

struct dnic_txq_stats {
	u64 packets;		/* wire packets: a TSO frame's segments */
	u64 bytes;
	u64 drops;
	struct u64_stats_sync syncp;
};

struct dnic_pair;

struct dnic_priv {
	struct net_device *dev;
	struct dnic_priv __rcu *peer;
	struct dnic_pair *pair;
	struct platform_device *pdev;
	unsigned int nqueues;		/* allocated queues (max channels) */
	struct dnic_rxq *rxq;
	struct dnic_txq_stats *txq_stats;
	struct dnic_cls __rcu *cls;
	u32 rx_pending;
	u32 tx_pending;
	bool hds_on;			/* data-path copy of the HDS config */
	u32 hds_thresh;
	bool running;
	/* Fault switches (debugfs), each a real driver bug class. */
	u32 fault_linear_bytes;	/* payload bytes left in the linear part */
	spinlock_t fault_lock;	/* one-shot fault: kind, countdown, report */
	int fault_kind;
	u32 fault_after;	/* split frames to let through first */
	u32 fault_arg;
	char fault_report[256];
	/* While xflow is armed: the latest split frame's payload and flow. */
	u8 *xflow_buf;
	unsigned int xflow_cap, xflow_len;
	struct dnic_flow xflow_fl;
	/* Since the countdown ended: split frames seen (all of one flow while
	 * it waits), and those whose payload could not be recorded.
	 */
	u32 xflow_seen, xflow_unrecorded;
	struct dentry *ddir;
};

struct dnic_pair {
	struct list_head list;
	u32 id;
	struct dnic_priv *side[2];
	struct platform_device *pdev[2];
};

static LIST_HEAD(dnic_pairs);
static DEFINE_MUTEX(dnic_pairs_lock);
static struct dentry *dnic_ddir;

/* The DMA devices (the netdevs' parents) outlive their pairs. A dma-buf
 * binding stays attached to the device until the last buffer of its page
 * pools comes back, which can be long after the netdevs are gone (an sk_buff
 * whose free was deferred to an idle CPU keeps its niovs), and then unmaps
 * through the device without holding a reference on it. So every device
 * registered here stays until the module is unloaded, and a pair created
 * again with the same ID gets its devices back. Indexed by platform device
 * id (2 * pair ID + side); changed under dnic_pairs_lock.
 */
static DEFINE_XARRAY(dnic_pdevs);

/* ------------------------------------------------------------------------ */
/* Frame parsing and receive-queue selection                                 */
/* ------------------------------------------------------------------------ */

/* Reads L2-L4 headers (always in the linear part for frames the stack
 * builds; skb_header_pointer copes otherwise). Leaves fl->ip false for
 * anything that is not untagged IPv4/IPv6.
 */
static void dnic_parse(const struct sk_buff *skb, struct dnic_flow *fl)
{
	unsigned int off = ETH_HLEN, l4_off, ip_len;
	struct ethhdr _eth;
	const struct ethhdr *eth;

	memset(fl, 0, sizeof(*fl));
	eth = skb_header_pointer(skb, 0, sizeof(_eth), &_eth);
	if (!eth)
		return;

	if (eth->h_proto == htons(ETH_P_IP)) {
		struct iphdr _iph;
		const struct iphdr *iph;

		iph = skb_header_pointer(skb, off, sizeof(_iph), &_iph);
		if (!iph || iph->version != 4 || iph->ihl < 5)
			return;
		fl->ip = true;
		fl->src4 = iph->saddr;
		fl->dst4 = iph->daddr;
		fl->tos = iph->tos;
		if (ip_is_fragment(iph))
			return;
		l4_off = off + iph->ihl * 4;
		ip_len = ntohs(iph->tot_len);
		if (ip_len < iph->ihl * 4 || off + ip_len > skb->len)
			return;
		fl->l4proto = iph->protocol;
		ip_len -= iph->ihl * 4;
	} else if (eth->h_proto == htons(ETH_P_IPV6)) {
		struct ipv6hdr _ip6h;
		const struct ipv6hdr *ip6h;

		ip6h = skb_header_pointer(skb, off, sizeof(_ip6h), &_ip6h);
		if (!ip6h || ip6h->version != 6)
			return;
		fl->ip = true;
		fl->ipv6 = true;
		fl->src6 = ip6h->saddr;
		fl->dst6 = ip6h->daddr;
		fl->tos = ipv6_get_dsfield(ip6h);
		l4_off = off + sizeof(*ip6h);
		ip_len = ntohs(ip6h->payload_len);
		if (l4_off + ip_len > skb->len)
			return;
		/* No extension headers: their frames get no split and no ports. */
		fl->l4proto = ip6h->nexthdr;
	} else {
		return;
	}

	if (fl->l4proto == IPPROTO_TCP) {
		struct tcphdr _th;
		const struct tcphdr *th;

		th = skb_header_pointer(skb, l4_off, sizeof(_th), &_th);
		if (!th || th->doff < 5 || th->doff * 4 > ip_len) {
			fl->l4proto = 0;
			return;
		}
		fl->sport = th->source;
		fl->dport = th->dest;
		fl->hdr_len = l4_off + th->doff * 4;
		fl->payload_len = ip_len - th->doff * 4;
	} else if (fl->l4proto == IPPROTO_UDP) {
		struct udphdr _uh;
		const struct udphdr *uh;

		uh = skb_header_pointer(skb, l4_off, sizeof(_uh), &_uh);
		if (!uh) {
			fl->l4proto = 0;
			return;
		}
		fl->sport = uh->source;
		fl->dport = uh->dest;
	} else {
		fl->l4proto = 0;
	}
}

/* Toeplitz hash of @len input bytes with @key (which must be len+4 bytes). */
static u32 dnic_toeplitz(const u8 *key, const u8 *in, unsigned int len)
{
	u32 hash = 0, window;
	unsigned int i, b;

	window = (u32)key[0] << 24 | (u32)key[1] << 16 | (u32)key[2] << 8 | key[3];
	for (i = 0; i < len; i++) {
		for (b = 0; b < 8; b++) {
			if (in[i] & (0x80 >> b))
				hash ^= window;
			window <<= 1;
			if (key[i + 4] & (0x80 >> b))
				window |= 1;
		}
	}
	return hash;
}

/* The bit of a TCP/UDP flow type in dnic_cls.hash_ip_only (-1: none). */
static int dnic_hash_bit(u32 flow_type)
{
	switch (flow_type) {
	case TCP_V4_FLOW:
		return 0;
	case UDP_V4_FLOW:
		return 1;
	case TCP_V6_FLOW:
		return 2;
	case UDP_V6_FLOW:
		return 3;
	}
	return -1;
}

/* RSS input as NICs define it: source address, destination address, then
 * source and destination port for TCP/UDP (unless that flow type hashes on
 * its addresses only).
 */
static u32 dnic_rss_hash(const struct dnic_cls *cls, const struct dnic_flow *fl,
			 bool *l4)
{
	u32 type;
	u8 in[36];
	unsigned int n;

	if (fl->ipv6) {
		memcpy(in, &fl->src6, 16);
		memcpy(in + 16, &fl->dst6, 16);
		n = 32;
	} else {
		memcpy(in, &fl->src4, 4);
		memcpy(in + 4, &fl->dst4, 4);
		n = 8;
	}
	*l4 = fl->l4proto == IPPROTO_TCP || fl->l4proto == IPPROTO_UDP;
	if (*l4) {
		type = fl->l4proto == IPPROTO_TCP ?
		       (fl->ipv6 ? TCP_V6_FLOW : TCP_V4_FLOW) :
		       (fl->ipv6 ? UDP_V6_FLOW : UDP_V4_FLOW);
		*l4 = !(cls->hash_ip_only & BIT(dnic_hash_bit(type)));
	}
	if (*l4) {
		memcpy(in + n, &fl->sport, 2);
		memcpy(in + n + 2, &fl->dport, 2);
		n += 4;
	}
	return dnic_toeplitz(cls->key, in, n);
}

static bool dnic_match4(const struct ethtool_tcpip4_spec *v,
			const struct ethtool_tcpip4_spec *m,
			const struct dnic_flow *fl)
{
	return !((fl->src4 ^ v->ip4src) & m->ip4src) &&
	       !((fl->dst4 ^ v->ip4dst) & m->ip4dst) &&
	       !((fl->sport ^ v->psrc) & m->psrc) &&
	       !((fl->dport ^ v->pdst) & m->pdst) &&
	       !((fl->tos ^ v->tos) & m->tos);
}

static bool dnic_match6(const struct ethtool_tcpip6_spec *v,
			const struct ethtool_tcpip6_spec *m,
			const struct dnic_flow *fl)
{
	int i;

	for (i = 0; i < 4; i++) {
		if ((fl->src6.s6_addr32[i] ^ v->ip6src[i]) & m->ip6src[i])
			return false;
		if ((fl->dst6.s6_addr32[i] ^ v->ip6dst[i]) & m->ip6dst[i])
			return false;
	}
	return !((fl->sport ^ v->psrc) & m->psrc) &&
	       !((fl->dport ^ v->pdst) & m->pdst) &&
	       !((fl->tos ^ v->tclass) & m->tclass);
}

static bool dnic_rule_matches(const struct ethtool_rx_flow_spec *fs,
			      const struct dnic_flow *fl)
{
	switch (fs->flow_type & ~(FLOW_EXT | FLOW_MAC_EXT | FLOW_RSS)) {
	case TCP_V4_FLOW:
		return !fl->ipv6 && fl->l4proto == IPPROTO_TCP &&
		       dnic_match4(&fs->h_u.tcp_ip4_spec, &fs->m_u.tcp_ip4_spec, fl);
	case UDP_V4_FLOW:
		return !fl->ipv6 && fl->l4proto == IPPROTO_UDP &&
		       dnic_match4(&fs->h_u.udp_ip4_spec, &fs->m_u.udp_ip4_spec, fl);
	case TCP_V6_FLOW:
		return fl->ipv6 && fl->l4proto == IPPROTO_TCP &&
		       dnic_match6(&fs->h_u.tcp_ip6_spec, &fs->m_u.tcp_ip6_spec, fl);
	case UDP_V6_FLOW:
		return fl->ipv6 && fl->l4proto == IPPROTO_UDP &&
		       dnic_match6(&fs->h_u.udp_ip6_spec, &fs->m_u.udp_ip6_spec, fl);
	}
	return false;
}

#define DNIC_RXQ_DISCARD	U32_MAX

/* Picks the receiving queue of @rx for a frame: the first (lowest location)
 * matching ntuple rule while the ntuple feature is on, else RSS.
 */
static u32 dnic_select_rxq(struct dnic_priv *rx, const struct dnic_flow *fl,
			   struct dnic_cb *cb)
{
	unsigned int nq = READ_ONCE(rx->dev->real_num_rx_queues);
	const struct dnic_cls *cls = rcu_dereference(rx->cls);
	u32 q = 0;
	bool l4;
	int loc;

	if (!fl->ip)
		return 0;
	cb->hash = dnic_rss_hash(cls, fl, &l4);
	cb->hash_l4 = l4;

	if (fl->l4proto && (READ_ONCE(rx->dev->features) & NETIF_F_NTUPLE)) {
		for_each_set_bit(loc, cls->used, DNIC_MAX_RULES) {
			const struct ethtool_rx_flow_spec *fs = &cls->rules[loc];

			if (!dnic_rule_matches(fs, fl))
				continue;
			if (fs->ring_cookie == RX_CLS_FLOW_DISC)
				return DNIC_RXQ_DISCARD;
			if ((fs->flow_type & FLOW_RSS) && !cls->rule_ctx[loc])
				q = cls->indir[cb->hash % DNIC_INDIR_SIZE];
			else if ((fs->flow_type & FLOW_RSS) &&
				 cls->rule_ctx[loc] < DNIC_MAX_RSS_CTX)
				q = cls->ctx_indir[cls->rule_ctx[loc]]
						  [cb->hash % DNIC_INDIR_SIZE];
			else
				q = ethtool_get_flow_spec_ring(fs->ring_cookie);
			return q < nq ? q : 0;
		}
	}
	q = cls->indir[cb->hash % DNIC_INDIR_SIZE];
	return q < nq ? q : 0;
}

/* ------------------------------------------------------------------------ */
/* Buffers: CPU access at a DMA address                                      */
/* ------------------------------------------------------------------------ */

/* The kernel virtual address of @len bytes at DMA address @dma of @dev, or
 * NULL when that memory is not RAM the direct map covers. With dma-direct
 * and no IOMMU the DMA address is the physical address.
 */
static void *dnic_dma_to_virt(struct device *dev, dma_addr_t dma,
			      unsigned int len)
{
	phys_addr_t phys = dma_to_phys(dev, dma);

	if (!len || !pfn_valid(PHYS_PFN(phys)) ||
	    !pfn_valid(PHYS_PFN(phys + len - 1)))
		return NULL;
	return phys_to_virt(phys);
}

/* Copies @len bytes at @off of the transmitted frame @skb to @to. Reads
 * net_iov frags (devmem TX) through their DMA address, as a device would.
 */
static int dnic_copy_frame(struct device *dma_dev, const struct sk_buff *skb,
			   unsigned int off, void *to, unsigned int len)
{
	unsigned int head = skb_headlen(skb), i;

	if (skb_frags_readable(skb))
		return skb_copy_bits(skb, off, to, len);
	if (skb_has_frag_list(skb))
		return -EINVAL;

	if (off < head) {
		unsigned int n = min(len, head - off);

		memcpy(to, skb->data + off, n);
		to += n;
		off += n;
		len -= n;
	}
	off -= head;
	for (i = 0; len && i < skb_shinfo(skb)->nr_frags; i++) {
		const skb_frag_t *frag = &skb_shinfo(skb)->frags[i];
		unsigned int fsize = skb_frag_size(frag), n;
		const void *from;

		if (off >= fsize) {
			off -= fsize;
			continue;
		}
		n = min(len, fsize - off);
		if (skb_frag_is_net_iov(frag)) {
			dma_addr_t dma = __skb_frag_dma_map(dma_dev, frag, off, n,
							    DMA_TO_DEVICE);

			from = dnic_dma_to_virt(dma_dev, dma, n);
			if (!from)
				return -EFAULT;
		} else {
			from = skb_frag_address(frag) + off;
		}
		memcpy(to, from, n);
		to += n;
		len -= n;
		off = 0;
	}
	return len ? -EFAULT : 0;
}

static void *dnic_buf_virt(struct dnic_rxq *rq, netmem_ref nm,
			   unsigned int off, unsigned int len)
{
	void *va;

	if (!netmem_is_net_iov(nm))
		return netmem_address(nm) + off;
	va = dnic_dma_to_virt(&rq->priv->pdev->dev,
			      page_pool_get_dma_addr_netmem(nm) + off, len);
	return va;
}

/* Drops the driver's reference on the buffer being filled. */
static void dnic_rxq_put_buf(struct dnic_rxq *rq, bool napi)
{
	if (rq->buf)
		page_pool_put_full_netmem(rq->pp, rq->buf, napi);
	rq->buf = 0;
	rq->buf_off = 0;
}

/* ------------------------------------------------------------------------ */
/* Receive                                                                   */
/* ------------------------------------------------------------------------ */

/* One-shot driver faults (debugfs "fault"), each a real driver bug class. */
enum dnic_fault_kind {
	DNIC_FAULT_NONE,
	DNIC_FAULT_STALE,	/* payload not written: the buffer's old bytes */
	DNIC_FAULT_SWAP,	/* the halves of a payload, as two frags, swapped */
	DNIC_FAULT_DUP,		/* the previous frame's payload delivered again */
	DNIC_FAULT_CORRUPT,	/* one byte flipped */
	DNIC_FAULT_OFFSET,	/* the first frag's offset reported N bytes late */
	DNIC_FAULT_XFLOW,	/* another flow's latest payload in this frame */
};

static const char *const dnic_fault_names[] = {
	[DNIC_FAULT_NONE] = "none",
	[DNIC_FAULT_STALE] = "stale",
	[DNIC_FAULT_SWAP] = "swap",
	[DNIC_FAULT_DUP] = "dup",
	[DNIC_FAULT_CORRUPT] = "corrupt",
	[DNIC_FAULT_OFFSET] = "offset",
	[DNIC_FAULT_XFLOW] = "xflow",
};

/* Copies @len payload bytes to the pieces @va/@sz (in order). */
static void dnic_scatter(void *const *va, const unsigned int *sz, int n,
			 const u8 *from)
{
	int i;

	for (i = 0; i < n; i++) {
		memcpy(va[i], from, sz[i]);
		from += sz[i];
	}
}

/* Writes @len payload bytes at @off of @wire into the queue's pool buffers,
 * in pieces that never cross a buffer boundary, and attaches each piece to
 * @skb as a frag (unreadable when the pool's memory is a net_iov provider).
 * @fault (one of enum dnic_fault_kind) spoils this frame's payload on purpose.
 */
static int dnic_rx_payload(struct dnic_rxq *rq, struct sk_buff *skb,
			   const struct sk_buff *wire, unsigned int off,
			   unsigned int len, int fault)
{
	struct device *dma_dev = &rq->priv->pdev->dev;
	unsigned int sz[MAX_SKB_FRAGS], half = len / 2, done = 0;
	void *va[MAX_SKB_FRAGS];
	int n = 0, first = skb_shinfo(skb)->nr_frags, err = 0;
	u8 *want = NULL, *tmp = NULL;
	bool split_half = false;

	/* The swap fault makes the two halves two frags, when one more frag fits. */
	if (fault == DNIC_FAULT_SWAP) {
		unsigned int room = rq->buf && rq->buf_off < rq->buf_size ?
				    rq->buf_size - rq->buf_off : 0;
		unsigned int need = len <= room ? 1 :
			!!room + DIV_ROUND_UP(len - room, rq->buf_size);

		split_half = first + need + 1 <= MAX_SKB_FRAGS;
	}

	while (done < len) {
		unsigned int size, nr = skb_shinfo(skb)->nr_frags;

		if (!rq->buf || rq->buf_off >= rq->buf_size) {
			dnic_rxq_put_buf(rq, true);
			rq->buf = page_pool_alloc_netmems(rq->pp, GFP_ATOMIC |
							  __GFP_NOWARN);
			if (!rq->buf)
				return -ENOMEM;
		}
		if (nr >= MAX_SKB_FRAGS)
			return -EMSGSIZE;
		size = min(len - done, rq->buf_size - rq->buf_off);
		if (split_half && done < half && done + size > half)
			size = half - done;
		va[n] = dnic_buf_virt(rq, rq->buf, rq->buf_off, size);
		if (!va[n])
			return -EFAULT;
		sz[n++] = size;
		page_pool_ref_netmem(rq->buf);
		skb_add_rx_frag_netmem(skb, nr, rq->buf, rq->buf_off, size, size);
		rq->buf_off += size;
		done += size;
	}

	if (fault == DNIC_FAULT_NONE) {
		int i;

		for (i = 0, done = 0; i < n && !err; done += sz[i], i++)
			err = dnic_copy_frame(dma_dev, wire, off + done, va[i], sz[i]);
		return err;
	}

	/* A fault: what should arrive (want) and what does (tmp, scattered). */
	want = kmalloc(len, GFP_ATOMIC | __GFP_NOWARN);
	tmp = kmalloc(len, GFP_ATOMIC | __GFP_NOWARN);
	if (!want || !tmp) {
		err = -ENOMEM;
		goto out;
	}
	err = dnic_copy_frame(dma_dev, wire, off, want, len);
	if (err)
		goto out;
	switch (fault) {
	case DNIC_FAULT_STALE:
		break;
	case DNIC_FAULT_SWAP:
		memcpy(tmp, want + half, half);
		memcpy(tmp + half, want, half);
		memcpy(tmp + 2 * half, want + 2 * half, len - 2 * half);
		dnic_scatter(va, sz, n, tmp);
		break;
	case DNIC_FAULT_DUP:
	case DNIC_FAULT_XFLOW:
		memcpy(tmp, want, len);
		memcpy(tmp, rq->last, min(len, rq->last_len));
		dnic_scatter(va, sz, n, tmp);
		break;
	case DNIC_FAULT_CORRUPT:
		memcpy(tmp, want, len);
		tmp[len / 2] ^= 0xff;
		dnic_scatter(va, sz, n, tmp);
		break;
	case DNIC_FAULT_OFFSET: {
		unsigned int shift = rq->fault_arg;
		int i;

		dnic_scatter(va, sz, n, want);
		/* The first frag of the frame with room is reported late by N
		 * bytes, or early when late would leave its buffer.
		 */
		for (i = 0; i < n; i++) {
			skb_frag_t *f = &skb_shinfo(skb)->frags[first + i];
			unsigned int o = skb_frag_off(f);

			if (o + shift + sz[i] <= rq->buf_size) {
				skb_frag_off_add(f, shift);
				/* The window now ends N bytes past the payload:
				 * keep the next frame out of them, so the reader
				 * sees the bytes counted below.
				 */
				if (skb_frag_netmem(f) == rq->buf &&
				    rq->buf_off < o + sz[i] + shift)
					rq->buf_off = o + sz[i] + shift;
			} else if (o >= shift)
				skb_frag_off_add(f, -(int)shift);
			else
				continue;
			va[i] = dnic_buf_virt(rq, skb_frag_netmem(f),
					      skb_frag_off(f), sz[i]);
			if (!va[i])
				err = -EFAULT;
			break;
		}
		break;
	}
	}
	/* How many delivered bytes differ from the stream: 0 means the fault
	 * changed nothing a reader could see (the same bytes came back).
	 */
	if (!err) {
		unsigned int i, j, at = 0;

		rq->fault_differ = 0;
		for (i = 0; i < n; at += sz[i], i++)
			for (j = 0; j < sz[i]; j++)
				rq->fault_differ += ((u8 *)va[i])[j] != want[at + j];
	}
out:
	kfree(want);
	kfree(tmp);
	return err;
}

/* Internal: this frame's payload is kept for a dup fault on the next one. */
#define DNIC_FAULT_KEEP	(-1)

static bool dnic_same_flow(const struct dnic_flow *a, const struct dnic_flow *b)
{
	if (a->ipv6 != b->ipv6 || a->sport != b->sport || a->dport != b->dport)
		return false;
	if (a->ipv6)
		return ipv6_addr_equal(&a->src6, &b->src6) &&
		       ipv6_addr_equal(&a->dst6, &b->dst6);
	return a->src4 == b->src4 && a->dst4 == b->dst4;
}

/* The armed xflow fault (under fault_lock) for the split frame @wire, whose
 * @len payload bytes start at @off: once the countdown has ended, it fires
 * on the first frame whose flow differs from the latest split frame recorded,
 * handing that frame's payload to the queue (rq->last) for this one, which
 * gets its first min(@len, recorded) bytes. A frame of the same flow (or one
 * still counted down) becomes the latest instead.
 *
 * The recorded frame may be the shorter one: a flow's last frame is often
 * its tail, and when flows arrive one after another (devmem TX's few large
 * frames per flow, on a loaded host) that tail is the only frame before
 * another flow's; asking for a frame at least as long let such a run end
 * with the fault still armed.
 */
static int dnic_xflow_take(struct dnic_rxq *rq, const struct sk_buff *wire,
			   unsigned int off, unsigned int len)
{
	struct dnic_priv *priv = rq->priv;
	struct dnic_flow fl;

	dnic_parse(wire, &fl);
	if (!priv->fault_after && priv->xflow_len &&
	    !dnic_same_flow(&fl, &priv->xflow_fl)) {
		kfree(rq->last);
		rq->last = priv->xflow_buf;
		rq->last_len = priv->xflow_len;
		priv->xflow_buf = NULL;
		priv->xflow_cap = 0;
		priv->xflow_len = 0;
		rq->xflow_into[0] = ntohs(fl.sport);
		rq->xflow_into[1] = ntohs(fl.dport);
		rq->xflow_from[0] = ntohs(priv->xflow_fl.sport);
		rq->xflow_from[1] = ntohs(priv->xflow_fl.dport);
		WRITE_ONCE(priv->fault_kind, DNIC_FAULT_NONE);
		return DNIC_FAULT_XFLOW;
	}
	if (priv->fault_after)
		priv->fault_after--;
	else
		priv->xflow_seen++;
	if (priv->xflow_cap < len) {
		kfree(priv->xflow_buf);
		priv->xflow_buf = kmalloc(len, GFP_ATOMIC | __GFP_NOWARN);
		priv->xflow_cap = priv->xflow_buf ? len : 0;
	}
	priv->xflow_len = 0;
	if (priv->xflow_buf &&
	    !dnic_copy_frame(&priv->pdev->dev, wire, off, priv->xflow_buf, len)) {
		priv->xflow_len = len;
		priv->xflow_fl = fl;
	} else if (!priv->fault_after) {
		priv->xflow_unrecorded++;
	}
	return DNIC_FAULT_NONE;
}

/* The fault this split frame (@wire, @payload bytes at @off) gets, if one is
 * armed and due.
 */
static int dnic_fault_take(struct dnic_rxq *rq, const struct sk_buff *wire,
			   unsigned int off, unsigned int payload)
{
	struct dnic_priv *priv = rq->priv;
	int kind = DNIC_FAULT_NONE;

	if (!READ_ONCE(priv->fault_kind) || payload < 2)
		return DNIC_FAULT_NONE;
	spin_lock(&priv->fault_lock);
	if (priv->fault_kind == DNIC_FAULT_NONE) {
		/* disarmed meanwhile */
	} else if (priv->fault_kind == DNIC_FAULT_XFLOW) {
		kind = dnic_xflow_take(rq, wire, off, payload);
	} else if (priv->fault_after) {
		priv->fault_after--;
		if (!priv->fault_after && priv->fault_kind == DNIC_FAULT_DUP)
			kind = DNIC_FAULT_KEEP;
	} else {
		kind = priv->fault_kind;
		rq->fault_arg = priv->fault_arg;
		WRITE_ONCE(priv->fault_kind, DNIC_FAULT_NONE);
	}
	spin_unlock(&priv->fault_lock);
	return kind;
}

/* The wire packets of a frame: a TSO frame stands for its segments. */
static unsigned int dnic_wire_packets(const struct sk_buff *skb)
{
	return skb_is_gso(skb) ? max_t(unsigned int, skb_shinfo(skb)->gso_segs, 1) : 1;
}

static void dnic_rx_count(struct dnic_rxq *rq, const struct sk_buff *wire,
			  bool split, bool hw_drop, bool alloc_fail)
{
	struct dnic_rxq_stats *s = &rq->stats;

	u64_stats_update_begin(&s->syncp);
	if (hw_drop)
		s->hw_drops++;
	else if (alloc_fail)
		s->alloc_fail++;
	else {
		s->packets++;
		s->wire_packets += dnic_wire_packets(wire);
		s->bytes += wire->len;
		s->split += split;
	}
	u64_stats_update_end(&s->syncp);
}

/* Receives one frame: headers (or, without a split, the whole frame) in the
 * skb's linear part; a TCP payload above hds-thresh in pool buffers.
 */
static void dnic_rx_one(struct dnic_rxq *rq, struct sk_buff *wire)
{
	struct dnic_priv *priv = rq->priv;
	const struct dnic_cb *cb = DNIC_CB(wire);
	unsigned int len = wire->len, lin, keep = 0;
	int fault = DNIC_FAULT_NONE, err;
	struct sk_buff *skb;
	bool split;

	split = cb->hdr_len && cb->payload_len && READ_ONCE(priv->hds_on) &&
		cb->payload_len > READ_ONCE(priv->hds_thresh);
	if (split)
		keep = min(READ_ONCE(priv->fault_linear_bytes), cb->payload_len);
	lin = split ? cb->hdr_len + keep : len;

	skb = napi_alloc_skb(&rq->napi, lin);
	if (!skb)
		goto alloc_fail;
	skb_mark_for_recycle(skb);
	if (dnic_copy_frame(&priv->pdev->dev, wire, 0, skb_put(skb, lin), lin))
		goto alloc_fail_free;
	if (split && keep < cb->payload_len) {
		unsigned int off = cb->hdr_len + keep, plen = cb->payload_len - keep;

		fault = dnic_fault_take(rq, wire, off, plen);
		err = dnic_rx_payload(rq, skb, wire, off, plen,
				      fault == DNIC_FAULT_KEEP ? DNIC_FAULT_NONE : fault);
		if (err && fault > DNIC_FAULT_NONE) {
			spin_lock(&priv->fault_lock);
			snprintf(priv->fault_report, sizeof(priv->fault_report),
				 "fired %s on queue %u but the frame was dropped (error %d)\n",
				 dnic_fault_names[fault], rq->idx, err);
			spin_unlock(&priv->fault_lock);
		}
		if (err)
			goto alloc_fail_free;
		if (fault > DNIC_FAULT_NONE) {
			char from[112] = "";

			if (fault == DNIC_FAULT_XFLOW)
				snprintf(from, sizeof(from),
					 " (flow %hu > %hu got the payload of flow %hu > %hu, a frame of %u bytes)",
					 rq->xflow_into[0], rq->xflow_into[1],
					 rq->xflow_from[0], rq->xflow_from[1],
					 rq->last_len);
			spin_lock(&priv->fault_lock);
			snprintf(priv->fault_report, sizeof(priv->fault_report),
				 "fired %s on queue %u%s: a frame of %u payload bytes, %u of them differ from the stream\n",
				 dnic_fault_names[fault], rq->idx, from, plen,
				 rq->fault_differ);
			spin_unlock(&priv->fault_lock);
		}
		if (fault == DNIC_FAULT_KEEP) {
			kfree(rq->last);
			rq->last = kmalloc(plen, GFP_ATOMIC | __GFP_NOWARN);
			rq->last_len = 0;
			if (rq->last && !dnic_copy_frame(&priv->pdev->dev, wire, off,
							 rq->last, plen))
				rq->last_len = plen;
		}
	}

	/* A TSO frame from the peer arrives whole (as with hardware LRO): the
	 * stack learns its segment size and count from the GSO fields.
	 */
	if (skb_is_gso(wire) && skb_is_gso_tcp(wire) && cb->hdr_len) {
		struct skb_shared_info *sh = skb_shinfo(skb);

		sh->gso_size = skb_shinfo(wire)->gso_size;
		sh->gso_type = skb_shinfo(wire)->gso_type &
			       (SKB_GSO_TCPV4 | SKB_GSO_TCPV6);
		sh->gso_segs = DIV_ROUND_UP(cb->payload_len, sh->gso_size);
	}
	skb->protocol = eth_type_trans(skb, priv->dev);
	/* The peer leaves TCP and UDP checksums to the "hardware"
	 * (CHECKSUM_PARTIAL): none is computed, and none is checked.
	 */
	if (cb->l4)
		skb->ip_summed = CHECKSUM_UNNECESSARY;
	if (cb->hash)
		skb_set_hash(skb, cb->hash,
			     cb->hash_l4 ? PKT_HASH_TYPE_L4 : PKT_HASH_TYPE_L3);
	skb_record_rx_queue(skb, rq->idx);
	dnic_rx_count(rq, wire, split, false, false);
	napi_gro_receive(&rq->napi, skb);
	consume_skb(wire);
	return;

alloc_fail_free:
	kfree_skb(skb);
alloc_fail:
	dnic_rx_count(rq, wire, false, false, true);
	kfree_skb_reason(wire, SKB_DROP_REASON_NOMEM);
}

static void dnic_wake_peer_tx(struct dnic_rxq *rq)
{
	struct dnic_priv *peer;

	if (!READ_ONCE(rq->peer_tx_stopped) ||
	    skb_queue_len(&rq->ring) > READ_ONCE(rq->priv->rx_pending) / 2)
		return;
	WRITE_ONCE(rq->peer_tx_stopped, false);
	rcu_read_lock();
	peer = rcu_dereference(rq->priv->peer);
	if (peer)
		netif_tx_wake_all_queues(peer->dev);
	rcu_read_unlock();
}

static int dnic_poll(struct napi_struct *napi, int budget)
{
	struct dnic_rxq *rq = container_of(napi, struct dnic_rxq, napi);
	struct sk_buff *wire;
	int done = 0;

	while (done < budget && (wire = skb_dequeue(&rq->ring))) {
		dnic_rx_one(rq, wire);
		done++;
	}
	/* Pairs with the barrier after stopping a peer TX queue in xmit. */
	smp_mb();
	dnic_wake_peer_tx(rq);

	if (done < budget)
		napi_complete_done(napi, done);
	return done;
}

/* ------------------------------------------------------------------------ */
/* Transmit: the wire                                                        */
/* ------------------------------------------------------------------------ */

static void dnic_tx_count(struct dnic_priv *priv, unsigned int q,
			  unsigned int len, unsigned int segs, bool drop)
{
	struct dnic_txq_stats *s = &priv->txq_stats[q];

	u64_stats_update_begin(&s->syncp);
	if (drop) {
		s->drops++;
	} else {
		s->packets += segs;
		s->bytes += len;
	}
	u64_stats_update_end(&s->syncp);
}

static netdev_tx_t dnic_xmit(struct sk_buff *skb, struct net_device *dev)
{
	struct dnic_priv *priv = netdev_priv(dev), *peer;
	unsigned int len = skb->len, txq = skb_get_queue_mapping(skb);
	unsigned int segs = dnic_wire_packets(skb);
	struct dnic_flow fl;
	struct dnic_rxq *rq;
	u32 q;

	if (txq >= priv->nqueues)
		txq = 0;
	rcu_read_lock();
	peer = rcu_dereference(priv->peer);
	if (!peer || !READ_ONCE(peer->running))
		goto drop;

	dnic_parse(skb, &fl);
	memset(DNIC_CB(skb), 0, sizeof(struct dnic_cb));
	q = dnic_select_rxq(peer, &fl, DNIC_CB(skb));
	if (q == DNIC_RXQ_DISCARD)
		goto drop;
	DNIC_CB(skb)->hdr_len = fl.l4proto == IPPROTO_TCP ? fl.hdr_len : 0;
	DNIC_CB(skb)->payload_len = fl.payload_len;
	DNIC_CB(skb)->l4 = fl.l4proto == IPPROTO_TCP || fl.l4proto == IPPROTO_UDP;

	rq = &peer->rxq[q];
	if (skb_queue_len(&rq->ring) >= READ_ONCE(peer->rx_pending)) {
		dnic_rx_count(rq, skb, false, true, false);
		goto drop;
	}
	skb_tx_timestamp(skb);
	skb_queue_tail(&rq->ring, skb);
	if (skb_queue_len(&rq->ring) >= READ_ONCE(peer->rx_pending)) {
		struct netdev_queue *ntxq = netdev_get_tx_queue(dev, txq);

		netif_tx_stop_queue(ntxq);
		WRITE_ONCE(rq->peer_tx_stopped, true);
		/* Pairs with the barrier in dnic_poll(): the flag's store must be
		 * visible before the ring's length is read again. A full barrier:
		 * the stop's atomic bit op comes before the store, so the store
		 * and the load below could still pass each other (store-load
		 * reordering is allowed even on x86), and then the poll that
		 * drained the ring sees no flag and this check a full ring: the
		 * queue stays stopped until another frame reaches this ring.
		 */
		smp_mb();
		if (skb_queue_len(&rq->ring) <= READ_ONCE(peer->rx_pending) / 2)
			netif_tx_start_queue(ntxq);
	}
	napi_schedule(&rq->napi);
	rcu_read_unlock();
	dnic_tx_count(priv, txq, len, segs, false);
	return NETDEV_TX_OK;

drop:
	rcu_read_unlock();
	dnic_tx_count(priv, txq, len, segs, true);
	kfree_skb(skb);
	return NETDEV_TX_OK;
}

/* ------------------------------------------------------------------------ */
/* RX queues, page pools, queue management ops                               */
/* ------------------------------------------------------------------------ */

static unsigned int dnic_order(const struct netdev_queue_config *qcfg)
{
	if (!qcfg->rx_page_size || qcfg->rx_page_size <= PAGE_SIZE)
		return 0;
	return ilog2(qcfg->rx_page_size) - PAGE_SHIFT;
}

/* One page pool per RX queue, created the way devmem drivers create theirs:
 * DMA-mapped and synced by the pool, unreadable netmem allowed exactly when
 * header split is on (the core then hands it the queue's memory provider).
 */
static struct page_pool *dnic_create_pool(struct dnic_priv *priv,
					  unsigned int idx,
					  const struct netdev_queue_config *qcfg,
					  struct napi_struct *napi)
{
	unsigned int order = dnic_order(qcfg);
	struct page_pool_params pp = {
		.order = order,
		.pool_size = priv->rx_pending,
		.nid = NUMA_NO_NODE,
		.dev = &priv->pdev->dev,
		.napi = napi,
		.dma_dir = DMA_FROM_DEVICE,
		.max_len = PAGE_SIZE << order,
		.offset = 0,
		.netdev = priv->dev,
		.queue_idx = idx,
		.flags = PP_FLAG_DMA_MAP | PP_FLAG_DMA_SYNC_DEV,
	};

	if (priv->dev->cfg->hds_config == ETHTOOL_TCP_DATA_SPLIT_ENABLED)
		pp.flags |= PP_FLAG_ALLOW_UNREADABLE_NETMEM;
	return page_pool_create(&pp);
}

struct dnic_qmem {
	struct page_pool *pp;
	netmem_ref buf;
	unsigned int buf_size;
};

static int dnic_queue_mem_alloc(struct net_device *dev,
				struct netdev_queue_config *qcfg,
				void *per_queue_mem, int idx)
{
	struct dnic_priv *priv = netdev_priv(dev);
	struct dnic_qmem *qmem = per_queue_mem;
	struct page_pool *pp;

	pp = dnic_create_pool(priv, idx, qcfg, netif_running(dev) ?
			      &priv->rxq[idx].napi : NULL);
	if (IS_ERR(pp))
		return PTR_ERR(pp);
	qmem->pp = pp;
	qmem->buf = 0;
	qmem->buf_size = PAGE_SIZE << dnic_order(qcfg);
	return 0;
}

static void dnic_queue_mem_free(struct net_device *dev, void *per_queue_mem)
{
	struct dnic_qmem *qmem = per_queue_mem;

	if (!qmem->pp)
		return;
	if (qmem->buf)
		page_pool_put_full_netmem(qmem->pp, qmem->buf, false);
	page_pool_destroy(qmem->pp);
	qmem->pp = NULL;
	qmem->buf = 0;
}

static int dnic_queue_start(struct net_device *dev,
			    struct netdev_queue_config *qcfg,
			    void *per_queue_mem, int idx)
{
	struct dnic_priv *priv = netdev_priv(dev);
	struct dnic_qmem *qmem = per_queue_mem;
	struct dnic_rxq *rq = &priv->rxq[idx];

	netdev_assert_locked(dev);
	rq->pp = qmem->pp;
	rq->buf_size = qmem->buf_size;
	rq->buf = 0;
	rq->buf_off = 0;
	qmem->pp = NULL;
	napi_enable_locked(&rq->napi);
	/* Frames that waited in the ring, or a peer TX queue this ring
	 * stopped: the poll takes the one and wakes the other.
	 */
	if (!skb_queue_empty(&rq->ring) || READ_ONCE(rq->peer_tx_stopped))
		napi_schedule(&rq->napi);
	return 0;
}

static int dnic_queue_stop(struct net_device *dev, void *per_queue_mem,
			   int idx)
{
	struct dnic_priv *priv = netdev_priv(dev);
	struct dnic_qmem *qmem = per_queue_mem;
	struct dnic_rxq *rq = &priv->rxq[idx];

	netdev_assert_locked(dev);
	napi_disable_locked(&rq->napi);
	page_pool_disable_direct_recycling(rq->pp);
	qmem->pp = rq->pp;
	qmem->buf = rq->buf;
	qmem->buf_size = rq->buf_size;
	rq->pp = NULL;
	rq->buf = 0;
	rq->buf_off = 0;
	return 0;
}

static void dnic_default_qcfg(struct net_device *dev,
			      struct netdev_queue_config *qcfg)
{
	qcfg->rx_page_size = PAGE_SIZE;
}

static int dnic_validate_qcfg(struct net_device *dev,
			      struct netdev_queue_config *qcfg,
			      struct netlink_ext_ack *extack)
{
	if (!is_power_of_2(qcfg->rx_page_size)) {
		NL_SET_ERR_MSG_FMT_MOD(extack, "rx-page-size %u is not a power of 2",
				       qcfg->rx_page_size);
		return -EINVAL;
	}
	if (qcfg->rx_page_size < PAGE_SIZE ||
	    qcfg->rx_page_size > DNIC_RX_PAGE_SIZE_MAX) {
		NL_SET_ERR_MSG_FMT_MOD(extack,
				       "rx-page-size %u not in supported range [%lu, %u]",
				       qcfg->rx_page_size, PAGE_SIZE,
				       DNIC_RX_PAGE_SIZE_MAX);
		return -ERANGE;
	}
	return 0;
}

static const struct netdev_queue_mgmt_ops dnic_queue_mgmt_ops = {
	.ndo_queue_mem_size	= sizeof(struct dnic_qmem),
	.ndo_queue_mem_alloc	= dnic_queue_mem_alloc,
	.ndo_queue_mem_free	= dnic_queue_mem_free,
	.ndo_queue_start	= dnic_queue_start,
	.ndo_queue_stop		= dnic_queue_stop,
	.ndo_default_qcfg	= dnic_default_qcfg,
	.ndo_validate_qcfg	= dnic_validate_qcfg,
	.supported_params	= QCFG_RX_PAGE_SIZE,
};

static void dnic_close_queues(struct dnic_priv *priv, unsigned int n)
{
	unsigned int i;

	for (i = 0; i < n; i++) {
		struct dnic_rxq *rq = &priv->rxq[i];

		netif_queue_set_napi(priv->dev, i, NETDEV_QUEUE_TYPE_RX, NULL);
		napi_disable_locked(&rq->napi);
		__netif_napi_del_locked(&rq->napi);
	}
	synchronize_net();
	for (i = 0; i < n; i++) {
		struct dnic_rxq *rq = &priv->rxq[i];

		skb_queue_purge(&rq->ring);
		kfree(rq->last);
		rq->last = NULL;
		rq->last_len = 0;
		dnic_rxq_put_buf(rq, false);
		page_pool_destroy(rq->pp);
		rq->pp = NULL;
	}
}

static int dnic_open(struct net_device *dev)
{
	struct dnic_priv *priv = netdev_priv(dev), *peer;
	unsigned int i;

	netdev_assert_locked(dev);
	for (i = 0; i < priv->nqueues; i++) {
		struct dnic_rxq *rq = &priv->rxq[i];
		struct netdev_queue_config qcfg;
		struct page_pool *pp;

		netif_napi_add_config_locked(dev, &rq->napi, dnic_poll, i);
		netdev_queue_config(dev, i, &qcfg);
		pp = dnic_create_pool(priv, i, &qcfg, &rq->napi);
		if (IS_ERR(pp)) {
			__netif_napi_del_locked(&rq->napi);
			dnic_close_queues(priv, i);
			return PTR_ERR(pp);
		}
		rq->pp = pp;
		rq->buf_size = PAGE_SIZE << dnic_order(&qcfg);
		netif_queue_set_napi(dev, i, NETDEV_QUEUE_TYPE_RX, &rq->napi);
		napi_enable_locked(&rq->napi);
	}
	WRITE_ONCE(priv->running, true);
	netif_tx_start_all_queues(dev);

	peer = rtnl_dereference(priv->peer);
	if (peer && netif_running(peer->dev)) {
		netif_carrier_on(dev);
		netif_carrier_on(peer->dev);
	}
	return 0;
}

static int dnic_stop(struct net_device *dev)
{
	struct dnic_priv *priv = netdev_priv(dev), *peer;

	netdev_assert_locked(dev);
	netif_carrier_off(dev);
	peer = rtnl_dereference(priv->peer);
	if (peer)
		netif_carrier_off(peer->dev);
	WRITE_ONCE(priv->running, false);
	netif_tx_stop_all_queues(dev);
	dnic_close_queues(priv, priv->nqueues);
	return 0;
}

static void dnic_get_stats64(struct net_device *dev,
			     struct rtnl_link_stats64 *st)
{
	struct dnic_priv *priv = netdev_priv(dev);
	unsigned int i, start;

	for (i = 0; i < priv->nqueues; i++) {
		const struct dnic_rxq_stats *r = &priv->rxq[i].stats;
		const struct dnic_txq_stats *t = &priv->txq_stats[i];
		u64 pk, by, hw, af, tpk, tby, tdr;

		do {
			start = u64_stats_fetch_begin(&r->syncp);
			pk = r->wire_packets;
			by = r->bytes;
			hw = r->hw_drops;
			af = r->alloc_fail;
		} while (u64_stats_fetch_retry(&r->syncp, start));
		do {
			start = u64_stats_fetch_begin(&t->syncp);
			tpk = t->packets;
			tby = t->bytes;
			tdr = t->drops;
		} while (u64_stats_fetch_retry(&t->syncp, start));
		st->rx_packets += pk;
		st->rx_bytes += by;
		st->rx_dropped += hw + af;
		st->rx_missed_errors += hw;
		st->tx_packets += tpk;
		st->tx_bytes += tby;
		st->tx_dropped += tdr;
	}
}

static int dnic_set_features(struct net_device *dev, netdev_features_t features)
{
	struct dnic_priv *priv = netdev_priv(dev);
	struct dnic_cls *old, *cls;

	if (!(dev->features & NETIF_F_NTUPLE) || (features & NETIF_F_NTUPLE))
		return 0;
	/* Turning ntuple off removes every rule (as gve and ixgbe do). */
	old = rcu_dereference_protected(priv->cls, true);
	if (bitmap_empty(old->used, DNIC_MAX_RULES))
		return 0;
	cls = kmemdup(old, sizeof(*old), GFP_KERNEL);
	if (!cls)
		return -ENOMEM;
	bitmap_zero(cls->used, DNIC_MAX_RULES);
	rcu_assign_pointer(priv->cls, cls);
	kfree_rcu(old, rcu);
	return 0;
}

static int dnic_get_iflink(const struct net_device *dev)
{
	struct dnic_priv *priv = netdev_priv(dev), *peer;
	int iflink;

	rcu_read_lock();
	peer = rcu_dereference(priv->peer);
	iflink = peer ? READ_ONCE(peer->dev->ifindex) : READ_ONCE(dev->ifindex);
	rcu_read_unlock();
	return iflink;
}

static const struct net_device_ops dnic_netdev_ops = {
	.ndo_open		= dnic_open,
	.ndo_stop		= dnic_stop,
	.ndo_start_xmit		= dnic_xmit,
	.ndo_get_stats64	= dnic_get_stats64,
	.ndo_set_mac_address	= eth_mac_addr,
	.ndo_validate_addr	= eth_validate_addr,
	.ndo_set_features	= dnic_set_features,
	.ndo_get_iflink		= dnic_get_iflink,
};

/* Per-queue statistics (netdev qstats). */
static void dnic_fetch_rxq(const struct dnic_rxq_stats *r,
			   struct netdev_queue_stats_rx *stats)
{
	unsigned int start;

	do {
		start = u64_stats_fetch_begin(&r->syncp);
		stats->packets = r->wire_packets;
		stats->bytes = r->bytes;
		stats->hw_drops = r->hw_drops;
		stats->alloc_fail = r->alloc_fail;
	} while (u64_stats_fetch_retry(&r->syncp, start));
}

static void dnic_fetch_txq(const struct dnic_txq_stats *t,
			   struct netdev_queue_stats_tx *stats)
{
	unsigned int start;

	do {
		start = u64_stats_fetch_begin(&t->syncp);
		stats->packets = t->packets;
		stats->bytes = t->bytes;
		stats->hw_drops = t->drops;
	} while (u64_stats_fetch_retry(&t->syncp, start));
}

static void dnic_get_queue_stats_rx(struct net_device *dev, int idx,
				    struct netdev_queue_stats_rx *stats)
{
	struct dnic_priv *priv = netdev_priv(dev);

	dnic_fetch_rxq(&priv->rxq[idx].stats, stats);
}

static void dnic_get_queue_stats_tx(struct net_device *dev, int idx,
				    struct netdev_queue_stats_tx *stats)
{
	struct dnic_priv *priv = netdev_priv(dev);

	dnic_fetch_txq(&priv->txq_stats[idx], stats);
}

/* Inactive queues' history (beyond the current channel count). */
static void dnic_get_base_stats(struct net_device *dev,
				struct netdev_queue_stats_rx *rx,
				struct netdev_queue_stats_tx *tx)
{
	struct dnic_priv *priv = netdev_priv(dev);
	unsigned int i;

	rx->packets = rx->bytes = rx->hw_drops = rx->alloc_fail = 0;
	tx->packets = tx->bytes = tx->hw_drops = 0;
	for (i = dev->real_num_rx_queues; i < priv->nqueues; i++) {
		struct netdev_queue_stats_rx r;

		dnic_fetch_rxq(&priv->rxq[i].stats, &r);
		rx->packets += r.packets;
		rx->bytes += r.bytes;
		rx->hw_drops += r.hw_drops;
		rx->alloc_fail += r.alloc_fail;
	}
	for (i = dev->real_num_tx_queues; i < priv->nqueues; i++) {
		struct netdev_queue_stats_tx t;

		dnic_fetch_txq(&priv->txq_stats[i], &t);
		tx->packets += t.packets;
		tx->bytes += t.bytes;
		tx->hw_drops += t.hw_drops;
	}
}

static const struct netdev_stat_ops dnic_stat_ops = {
	.get_queue_stats_rx	= dnic_get_queue_stats_rx,
	.get_queue_stats_tx	= dnic_get_queue_stats_tx,
	.get_base_stats		= dnic_get_base_stats,
};

/* ------------------------------------------------------------------------ */
/* ethtool                                                                   */
/* ------------------------------------------------------------------------ */

static void dnic_get_drvinfo(struct net_device *dev,
			     struct ethtool_drvinfo *info)
{
	struct dnic_priv *priv = netdev_priv(dev);

	strscpy(info->driver, DNIC_DRV_NAME, sizeof(info->driver));
	strscpy(info->bus_info, dev_name(&priv->pdev->dev),
		sizeof(info->bus_info));
}

static void dnic_get_ringparam(struct net_device *dev,
			       struct ethtool_ringparam *ring,
			       struct kernel_ethtool_ringparam *kring,
			       struct netlink_ext_ack *extack)
{
	struct dnic_priv *priv = netdev_priv(dev);

	ring->rx_max_pending = DNIC_RING_MAX;
	ring->tx_max_pending = DNIC_RING_MAX;
	ring->rx_pending = priv->rx_pending;
	ring->tx_pending = priv->tx_pending;
	/* The effective mode: off unless explicitly enabled. */
	kring->tcp_data_split = priv->hds_on ? ETHTOOL_TCP_DATA_SPLIT_ENABLED :
					       ETHTOOL_TCP_DATA_SPLIT_DISABLED;
	kring->hds_thresh = priv->hds_thresh;
	kring->hds_thresh_max = DNIC_HDS_THRESH_MAX;
}

static int dnic_set_ringparam(struct net_device *dev,
			      struct ethtool_ringparam *ring,
			      struct kernel_ethtool_ringparam *kring,
			      struct netlink_ext_ack *extack)
{
	struct dnic_priv *priv = netdev_priv(dev);

	if (!ring->rx_pending || !ring->tx_pending) {
		NL_SET_ERR_MSG_MOD(extack, "ring sizes must be at least 1");
		return -EINVAL;
	}
	WRITE_ONCE(priv->rx_pending, ring->rx_pending);
	priv->tx_pending = ring->tx_pending;
	/* Pools are created with the configured mode; a queue only takes a
	 * memory provider through a restart, after the core checked HDS.
	 */
	WRITE_ONCE(priv->hds_on,
		   kring->tcp_data_split == ETHTOOL_TCP_DATA_SPLIT_ENABLED);
	WRITE_ONCE(priv->hds_thresh, kring->hds_thresh);
	return 0;
}

/* A driver without header split: rings report no split and refuse none of
 * the size settings; the ethtool core refuses tcp-data-split itself.
 */
static void dnic_nohds_get_ringparam(struct net_device *dev,
				     struct ethtool_ringparam *ring,
				     struct kernel_ethtool_ringparam *kring,
				     struct netlink_ext_ack *extack)
{
	dnic_get_ringparam(dev, ring, kring, extack);
	kring->tcp_data_split = ETHTOOL_TCP_DATA_SPLIT_UNKNOWN;
	kring->hds_thresh = 0;
	kring->hds_thresh_max = 0;
}

static void dnic_get_channels(struct net_device *dev,
			      struct ethtool_channels *ch)
{
	struct dnic_priv *priv = netdev_priv(dev);

	ch->max_combined = priv->nqueues;
	ch->combined_count = dev->real_num_rx_queues;
}

static void dnic_fill_default_indir(u32 *indir, unsigned int nq)
{
	unsigned int i;

	for (i = 0; i < DNIC_INDIR_SIZE; i++)
		indir[i] = ethtool_rxfh_indir_default(i, nq);
}

static int dnic_set_channels(struct net_device *dev,
			     struct ethtool_channels *ch)
{
	struct dnic_priv *priv = netdev_priv(dev), *peer;
	unsigned int n = ch->combined_count;
	struct dnic_cls *old, *cls = NULL;
	int err;

	if (!n || ch->rx_count || ch->tx_count || n > priv->nqueues)
		return -EINVAL;

	old = rcu_dereference_protected(priv->cls, true);
	if (!netif_is_rxfh_configured(dev)) {
		cls = kmemdup(old, sizeof(*old), GFP_KERNEL);
		if (!cls)
			return -ENOMEM;
		dnic_fill_default_indir(cls->indir, n);
		rcu_assign_pointer(priv->cls, cls);
		kfree_rcu(old, rcu);
	}
	err = netif_set_real_num_queues(dev, n, n);
	if (err)
		return err;

	/* Every queue keeps running (all rings stay allocated, as on NICs
	 * that size their rings for the maximum); the channel count only
	 * limits which queues receive and transmit.
	 */
	synchronize_net();
	netif_tx_wake_all_queues(dev);
	rcu_read_lock();
	peer = rcu_dereference(priv->peer);
	if (peer)
		netif_tx_wake_all_queues(peer->dev);
	rcu_read_unlock();
	return 0;
}

static u32 dnic_get_rx_ring_count(struct net_device *dev)
{
	return dev->real_num_rx_queues;
}

static u32 dnic_get_rxfh_indir_size(struct net_device *dev)
{
	return DNIC_INDIR_SIZE;
}

static u32 dnic_get_rxfh_key_size(struct net_device *dev)
{
	return DNIC_KEY_SIZE;
}

static int dnic_get_rxfh(struct net_device *dev, struct ethtool_rxfh_param *p)
{
	struct dnic_priv *priv = netdev_priv(dev);
	const struct dnic_cls *cls = rcu_dereference_protected(priv->cls, true);

	p->hfunc = ETH_RSS_HASH_TOP;
	if (p->indir)
		memcpy(p->indir, cls->indir, sizeof(cls->indir));
	if (p->key)
		memcpy(p->key, cls->key, sizeof(cls->key));
	return 0;
}

static int dnic_set_rxfh(struct net_device *dev, struct ethtool_rxfh_param *p,
			 struct netlink_ext_ack *extack)
{
	struct dnic_priv *priv = netdev_priv(dev);
	struct dnic_cls *old, *cls;
	unsigned int i;

	if (p->hfunc != ETH_RSS_HASH_NO_CHANGE && p->hfunc != ETH_RSS_HASH_TOP) {
		NL_SET_ERR_MSG_MOD(extack, "only the Toeplitz hash is supported");
		return -EOPNOTSUPP;
	}
	if (p->rss_context) {
		NL_SET_ERR_MSG_MOD(extack, "no additional RSS contexts");
		return -EOPNOTSUPP;
	}
	if (p->indir) {
		for (i = 0; i < DNIC_INDIR_SIZE; i++)
			if (p->indir[i] >= dev->real_num_rx_queues)
				return -EINVAL;
	}
	old = rcu_dereference_protected(priv->cls, true);
	cls = kmemdup(old, sizeof(*old), GFP_KERNEL);
	if (!cls)
		return -ENOMEM;
	if (p->indir)
		memcpy(cls->indir, p->indir, sizeof(cls->indir));
	if (p->key)
		memcpy(cls->key, p->key, sizeof(cls->key));
	rcu_assign_pointer(priv->cls, cls);
	kfree_rcu(old, rcu);
	return 0;
}

#define DNIC_RXH_IP	(RXH_IP_SRC | RXH_IP_DST)
#define DNIC_RXH_IP_L4	(DNIC_RXH_IP | RXH_L4_B_0_1 | RXH_L4_B_2_3)

/* Hash fields are the device's (no rxfh_per_ctx_fields): every context
 * hashes a flow type the same way.
 */
static int dnic_get_rxfh_fields(struct net_device *dev,
				struct ethtool_rxfh_fields *f)
{
	struct dnic_priv *priv = netdev_priv(dev);
	const struct dnic_cls *cls = rcu_dereference_protected(priv->cls, true);

	switch (f->flow_type) {
	case TCP_V4_FLOW:
	case TCP_V6_FLOW:
	case UDP_V4_FLOW:
	case UDP_V6_FLOW:
		f->data = cls->hash_ip_only & BIT(dnic_hash_bit(f->flow_type)) ?
			  DNIC_RXH_IP : DNIC_RXH_IP_L4;
		return 0;
	case IPV4_FLOW:
	case IPV6_FLOW:
		f->data = RXH_IP_SRC | RXH_IP_DST;
		return 0;
	}
	f->data = 0;
	return 0;
}

/* TCP and UDP flow types hash on the addresses and ports, or on the
 * addresses only; other flow types on the addresses, unchangeably.
 */
static int dnic_set_rxfh_fields(struct net_device *dev,
				const struct ethtool_rxfh_fields *f,
				struct netlink_ext_ack *extack)
{
	struct dnic_priv *priv = netdev_priv(dev);
	int bit = dnic_hash_bit(f->flow_type);
	struct dnic_cls *old, *cls;

	if (bit < 0) {
		if ((f->flow_type == IPV4_FLOW || f->flow_type == IPV6_FLOW) &&
		    f->data == DNIC_RXH_IP)
			return 0;
		NL_SET_ERR_MSG_MOD(extack, "flow type's hash fields are fixed");
		return -EOPNOTSUPP;
	}
	if (f->data != DNIC_RXH_IP && f->data != DNIC_RXH_IP_L4) {
		NL_SET_ERR_MSG_MOD(extack,
				   "hash on the addresses, or on the addresses and ports");
		return -EINVAL;
	}
	old = rcu_dereference_protected(priv->cls, true);
	cls = kmemdup(old, sizeof(*old), GFP_KERNEL);
	if (!cls)
		return -ENOMEM;
	if (f->data == DNIC_RXH_IP)
		cls->hash_ip_only |= BIT(bit);
	else
		cls->hash_ip_only &= ~BIT(bit);
	rcu_assign_pointer(priv->cls, cls);
	kfree_rcu(old, rcu);
	return 0;
}

static int dnic_get_rxnfc(struct net_device *dev, struct ethtool_rxnfc *info,
			  u32 *rule_locs)
{
	struct dnic_priv *priv = netdev_priv(dev);
	const struct dnic_cls *cls = rcu_dereference_protected(priv->cls, true);
	unsigned int n = 0;
	int loc;

	switch (info->cmd) {
	case ETHTOOL_GRXCLSRLCNT:
		info->rule_cnt = bitmap_weight(cls->used, DNIC_MAX_RULES);
		info->data = DNIC_MAX_RULES | RX_CLS_LOC_SPECIAL;
		return 0;
	case ETHTOOL_GRXCLSRULE:
		if (info->fs.location >= DNIC_MAX_RULES ||
		    !test_bit(info->fs.location, cls->used))
			return -ENOENT;
		info->fs = cls->rules[info->fs.location];
		if (info->fs.flow_type & FLOW_RSS)
			info->rss_context = cls->rule_ctx[info->fs.location];
		info->data = DNIC_MAX_RULES;
		return 0;
	case ETHTOOL_GRXCLSRLALL:
		info->data = DNIC_MAX_RULES;
		for_each_set_bit(loc, cls->used, DNIC_MAX_RULES) {
			if (n >= info->rule_cnt)
				return -EMSGSIZE;
			rule_locs[n++] = loc;
		}
		info->rule_cnt = n;
		return 0;
	}
	return -EOPNOTSUPP;
}

static int dnic_check_rule(struct net_device *dev,
			   const struct ethtool_rx_flow_spec *fs, u32 rss_ctx)
{
	u32 type = fs->flow_type & ~(FLOW_EXT | FLOW_RSS);

	if (type != TCP_V4_FLOW && type != UDP_V4_FLOW &&
	    type != TCP_V6_FLOW && type != UDP_V6_FLOW)
		return -EOPNOTSUPP;
	if ((fs->flow_type & FLOW_EXT) &&
	    (fs->m_ext.vlan_etype || fs->m_ext.vlan_tci ||
	     fs->m_ext.data[0] || fs->m_ext.data[1]))
		return -EOPNOTSUPP;
	if (fs->ring_cookie == RX_CLS_FLOW_DISC)
		return 0;
	/* A context rule takes its queue from the context's table (the core
	 * refuses a queue offset: no cap_rss_rxnfc_adds); context 0 is the
	 * default table.
	 */
	if (fs->flow_type & FLOW_RSS)
		return rss_ctx < DNIC_MAX_RSS_CTX ? 0 : -EINVAL;
	if (fs->ring_cookie == RX_CLS_FLOW_WAKE ||
	    ethtool_get_flow_spec_ring_vf(fs->ring_cookie))
		return -EOPNOTSUPP;
	if (ethtool_get_flow_spec_ring(fs->ring_cookie) >=
	    dev->real_num_rx_queues)
		return -EINVAL;
	return 0;
}

static int dnic_set_rxnfc(struct net_device *dev, struct ethtool_rxnfc *info)
{
	struct dnic_priv *priv = netdev_priv(dev);
	struct dnic_cls *old, *cls;
	u32 loc = info->fs.location;
	int err;

	/* Rules need the ntuple feature on, as on gve. */
	if (!(dev->features & NETIF_F_NTUPLE))
		return -EOPNOTSUPP;

	old = rcu_dereference_protected(priv->cls, true);
	switch (info->cmd) {
	case ETHTOOL_SRXCLSRLINS:
		err = dnic_check_rule(dev, &info->fs, info->rss_context);
		if (err)
			return err;
		if (loc & RX_CLS_LOC_SPECIAL) {
			switch (loc) {
			case RX_CLS_LOC_ANY:
			case RX_CLS_LOC_FIRST:
				loc = find_first_zero_bit(old->used,
							  DNIC_MAX_RULES);
				break;
			case RX_CLS_LOC_LAST:
				for (loc = DNIC_MAX_RULES; loc > 0; loc--)
					if (!test_bit(loc - 1, old->used))
						break;
				loc = loc ? loc - 1 : DNIC_MAX_RULES;
				break;
			default:
				return -EINVAL;
			}
			if (loc >= DNIC_MAX_RULES)
				return -ENOSPC;
		} else if (loc >= DNIC_MAX_RULES) {
			return -EINVAL;
		}
		cls = kmemdup(old, sizeof(*old), GFP_KERNEL);
		if (!cls)
			return -ENOMEM;
		cls->rules[loc] = info->fs;
		cls->rules[loc].location = loc;
		cls->rule_ctx[loc] = info->fs.flow_type & FLOW_RSS ?
				     info->rss_context : 0;
		set_bit(loc, cls->used);
		info->fs.location = loc;
		break;
	case ETHTOOL_SRXCLSRLDEL:
		if (loc >= DNIC_MAX_RULES || !test_bit(loc, old->used))
			return -ENOENT;
		cls = kmemdup(old, sizeof(*old), GFP_KERNEL);
		if (!cls)
			return -ENOMEM;
		clear_bit(loc, cls->used);
		break;
	default:
		return -EOPNOTSUPP;
	}
	rcu_assign_pointer(priv->cls, cls);
	kfree_rcu(old, rcu);
	return 0;
}

/* Additional RSS contexts: the ethtool core allocates the ids (below
 * DNIC_MAX_RSS_CTX) and keeps each context's settings; the driver keeps a
 * copy of each table in the classifier, where the receive path reads it.
 */
static int dnic_ctx_apply(struct net_device *dev, u32 id, const u32 *indir)
{
	struct dnic_priv *priv = netdev_priv(dev);
	struct dnic_cls *old, *cls;
	unsigned int i;

	if (id == 0 || id >= DNIC_MAX_RSS_CTX)
		return -EINVAL;
	for (i = 0; i < DNIC_INDIR_SIZE; i++)
		if (indir[i] >= dev->real_num_rx_queues)
			return -EINVAL;
	old = rcu_dereference_protected(priv->cls, true);
	cls = kmemdup(old, sizeof(*old), GFP_KERNEL);
	if (!cls)
		return -ENOMEM;
	memcpy(cls->ctx_indir[id], indir, sizeof(cls->ctx_indir[id]));
	rcu_assign_pointer(priv->cls, cls);
	kfree_rcu(old, rcu);
	return 0;
}

static int dnic_ctx_check(const struct ethtool_rxfh_param *rxfh,
			  struct netlink_ext_ack *extack)
{
	if (rxfh->hfunc != ETH_RSS_HASH_NO_CHANGE &&
	    rxfh->hfunc != ETH_RSS_HASH_TOP) {
		NL_SET_ERR_MSG_MOD(extack, "only the Toeplitz hash is supported");
		return -EOPNOTSUPP;
	}
	if (rxfh->key) {
		NL_SET_ERR_MSG_MOD(extack, "RSS contexts share the device's key");
		return -EOPNOTSUPP;
	}
	return 0;
}

static int dnic_create_rxfh_context(struct net_device *dev,
				    struct ethtool_rxfh_context *ctx,
				    const struct ethtool_rxfh_param *rxfh,
				    struct netlink_ext_ack *extack)
{
	struct dnic_priv *priv = netdev_priv(dev);
	u32 *indir = ethtool_rxfh_context_indir(ctx);
	int err;

	err = dnic_ctx_check(rxfh, extack);
	if (err)
		return err;
	/* What the core does not fill in itself. */
	if (!rxfh->indir)
		dnic_fill_default_indir(indir, dev->real_num_rx_queues);
	memcpy(ethtool_rxfh_context_key(ctx),
	       rcu_dereference_protected(priv->cls, true)->key, DNIC_KEY_SIZE);
	ctx->hfunc = ETH_RSS_HASH_TOP;
	ctx->input_xfrm = 0;
	return dnic_ctx_apply(dev, rxfh->rss_context,
			      rxfh->indir ? rxfh->indir : indir);
}

static int dnic_modify_rxfh_context(struct net_device *dev,
				    struct ethtool_rxfh_context *ctx,
				    const struct ethtool_rxfh_param *rxfh,
				    struct netlink_ext_ack *extack)
{
	int err = dnic_ctx_check(rxfh, extack);

	if (err || !rxfh->indir)
		return err;
	return dnic_ctx_apply(dev, rxfh->rss_context, rxfh->indir);
}

static int dnic_remove_rxfh_context(struct net_device *dev,
				    struct ethtool_rxfh_context *ctx,
				    u32 rss_context,
				    struct netlink_ext_ack *extack)
{
	/* The core refuses while a rule uses the context; its table stays
	 * in the classifier until the id is reused.
	 */
	return 0;
}

#define DNIC_ETHTOOL_COMMON						\
	.op_needs_rtnl		= ETHTOOL_OP_NEEDS_RTNL_SCHANNELS,	\
	.get_drvinfo		= dnic_get_drvinfo,			\
	.get_link		= ethtool_op_get_link,			\
	.set_ringparam		= dnic_set_ringparam,			\
	.get_channels		= dnic_get_channels,			\
	.set_channels		= dnic_set_channels,			\
	.get_rx_ring_count	= dnic_get_rx_ring_count,		\
	.get_rxnfc		= dnic_get_rxnfc,			\
	.set_rxnfc		= dnic_set_rxnfc,			\
	.get_rxfh_indir_size	= dnic_get_rxfh_indir_size,		\
	.get_rxfh_key_size	= dnic_get_rxfh_key_size,		\
	.get_rxfh		= dnic_get_rxfh,			\
	.set_rxfh		= dnic_set_rxfh,			\
	.get_rxfh_fields	= dnic_get_rxfh_fields,			\
	.set_rxfh_fields	= dnic_set_rxfh_fields,			\
	.rxfh_max_num_contexts	= DNIC_MAX_RSS_CTX,			\
	.create_rxfh_context	= dnic_create_rxfh_context,		\
	.modify_rxfh_context	= dnic_modify_rxfh_context,		\
	.remove_rxfh_context	= dnic_remove_rxfh_context

static const struct ethtool_ops dnic_ethtool_ops = {
	.supported_ring_params	= ETHTOOL_RING_USE_TCP_DATA_SPLIT |
				  ETHTOOL_RING_USE_HDS_THRS,
	.get_ringparam		= dnic_get_ringparam,
	DNIC_ETHTOOL_COMMON,
};

static const struct ethtool_ops dnic_nohds_ethtool_ops = {
	.get_ringparam		= dnic_nohds_get_ringparam,
	DNIC_ETHTOOL_COMMON,
};

/* ------------------------------------------------------------------------ */
/* debugfs                                                                   */
/* ------------------------------------------------------------------------ */

static int dnic_stats_show(struct seq_file *m, void *v)
{
	struct dnic_priv *priv = m->private;
	unsigned int i;

	seq_puts(m, "queue packets bytes hw_drops alloc_fail split ring buf_size provider tx_stopped peer_tx_stopped\n");
	netdev_lock(priv->dev);
	for (i = 0; i < priv->nqueues; i++) {
		const struct dnic_rxq_stats *r = &priv->rxq[i].stats;
		struct dnic_rxq *rq = &priv->rxq[i];
		unsigned int start;
		u64 pk, by, hw, af, sp;

		do {
			start = u64_stats_fetch_begin(&r->syncp);
			pk = r->packets;
			by = r->bytes;
			hw = r->hw_drops;
			af = r->alloc_fail;
			sp = r->split;
		} while (u64_stats_fetch_retry(&r->syncp, start));
		/* tx_stopped: this device's TX queue i; peer_tx_stopped: this
		 * RX ring stopped a TX queue of the peer and has not woken it.
		 */
		seq_printf(m, "%u %llu %llu %llu %llu %llu %u %u %s %s %s\n", i, pk,
			   by, hw, af, sp, skb_queue_len(&rq->ring),
			   rq->pp ? rq->buf_size : 0,
			   netif_rxq_has_unreadable_mp(priv->dev, i) ? "yes" : "no",
			   netif_tx_queue_stopped(netdev_get_tx_queue(priv->dev, i)) ?
			   "yes" : "no",
			   READ_ONCE(rq->peer_tx_stopped) ? "yes" : "no");
	}
	netdev_unlock(priv->dev);
	return 0;
}
DEFINE_SHOW_ATTRIBUTE(dnic_stats);

static ssize_t dnic_fault_read(struct file *file, char __user *ubuf,
			       size_t count, loff_t *ppos)
{
	struct dnic_priv *priv = file->private_data;
	char buf[256];
	int n;

	spin_lock_bh(&priv->fault_lock);
	if (priv->fault_kind == DNIC_FAULT_XFLOW && !priv->fault_after)
		n = scnprintf(buf, sizeof(buf),
			      "armed xflow, waiting for a split frame of another flow (%u split frames since the countdown, %u of them not recorded)\n",
			      priv->xflow_seen, priv->xflow_unrecorded);
	else if (priv->fault_kind)
		n = scnprintf(buf, sizeof(buf), "armed %s, %u split frames to go (arg %u)\n",
			      dnic_fault_names[priv->fault_kind], priv->fault_after,
			      priv->fault_arg);
	else
		n = scnprintf(buf, sizeof(buf), "%s",
			      priv->fault_report[0] ? priv->fault_report : "none\n");
	spin_unlock_bh(&priv->fault_lock);
	return simple_read_from_buffer(ubuf, count, ppos, buf, n);
}

/* "KIND AFTER [ARG]": after AFTER split frames, the next one gets the fault;
 * "none" disarms.
 */
static ssize_t dnic_fault_write(struct file *file, const char __user *ubuf,
				size_t count, loff_t *ppos)
{
	struct dnic_priv *priv = file->private_data;
	char buf[64], name[16];
	unsigned int after = 0, arg = 0;
	int kind, n;

	if (count >= sizeof(buf))
		return -EINVAL;
	if (copy_from_user(buf, ubuf, count))
		return -EFAULT;
	buf[count] = '\0';
	n = sscanf(buf, "%15s %u %u", name, &after, &arg);
	if (n < 1)
		return -EINVAL;
	for (kind = 0; kind < ARRAY_SIZE(dnic_fault_names); kind++)
		if (!strcmp(name, dnic_fault_names[kind]))
			break;
	if (kind == ARRAY_SIZE(dnic_fault_names) ||
	    (kind == DNIC_FAULT_OFFSET && !arg))
		return -EINVAL;
	spin_lock_bh(&priv->fault_lock);
	priv->fault_after = after;
	priv->fault_arg = arg;
	priv->fault_report[0] = '\0';
	priv->xflow_len = 0;
	priv->xflow_seen = 0;
	priv->xflow_unrecorded = 0;
	WRITE_ONCE(priv->fault_kind, kind);
	spin_unlock_bh(&priv->fault_lock);
	return count;
}

static const struct file_operations dnic_fault_fops = {
	.open = simple_open,
	.read = dnic_fault_read,
	.write = dnic_fault_write,
	.owner = THIS_MODULE,
};

/* ------------------------------------------------------------------------ */
/* Pairs                                                                     */
/* ------------------------------------------------------------------------ */

static void dnic_setup(struct net_device *dev)
{
	ether_setup(dev);
	eth_hw_addr_random(dev);
	dev->priv_flags |= IFF_LIVE_ADDR_CHANGE;
	dev->features |= NETIF_F_SG | NETIF_F_HW_CSUM | NETIF_F_HIGHDMA |
			 NETIF_F_RXCSUM | NETIF_F_TSO | NETIF_F_TSO6;
	dev->hw_features |= NETIF_F_SG | NETIF_F_HW_CSUM | NETIF_F_HIGHDMA |
			    NETIF_F_RXCSUM | NETIF_F_TSO | NETIF_F_TSO6 |
			    NETIF_F_NTUPLE;
	dev->max_mtu = ETH_MAX_MTU;
}

static void dnic_priv_free(struct dnic_priv *priv)
{
	kfree(rcu_dereference_protected(priv->cls, true));
	kfree(priv->rxq);
	kfree(priv->txq_stats);
	kfree(priv->xflow_buf);
}

static struct net_device *dnic_alloc(struct dnic_pair *pair, int side,
				     unsigned int nq, bool hds)
{
	struct net_device *dev;
	struct dnic_priv *priv;
	struct dnic_cls *cls;
	char name[IFNAMSIZ];
	unsigned int i;

	snprintf(name, sizeof(name), "dnic%u%c", pair->id, side ? 'b' : 'a');
	dev = alloc_netdev_mqs(sizeof(*priv), name, NET_NAME_USER, dnic_setup,
			       nq, nq);
	if (!dev)
		return NULL;
	priv = netdev_priv(dev);
	priv->dev = dev;
	priv->pair = pair;
	priv->pdev = pair->pdev[side];
	priv->nqueues = nq;
	priv->rx_pending = DNIC_RING_DEFAULT;
	priv->tx_pending = DNIC_RING_DEFAULT;
	spin_lock_init(&priv->fault_lock);
	priv->rxq = kcalloc(nq, sizeof(*priv->rxq), GFP_KERNEL);
	priv->txq_stats = kcalloc(nq, sizeof(*priv->txq_stats), GFP_KERNEL);
	cls = kzalloc(sizeof(*cls), GFP_KERNEL);
	if (!priv->rxq || !priv->txq_stats || !cls) {
		kfree(cls);
		dnic_priv_free(priv);
		free_netdev(dev);
		return NULL;
	}
	dnic_fill_default_indir(cls->indir, nq);
	netdev_rss_key_fill(cls->key, sizeof(cls->key));
	RCU_INIT_POINTER(priv->cls, cls);
	for (i = 0; i < nq; i++) {
		priv->rxq[i].priv = priv;
		priv->rxq[i].idx = i;
		skb_queue_head_init(&priv->rxq[i].ring);
		u64_stats_init(&priv->rxq[i].stats.syncp);
		u64_stats_init(&priv->txq_stats[i].syncp);
	}

	SET_NETDEV_DEV(dev, &priv->pdev->dev);
	dev->netdev_ops = &dnic_netdev_ops;
	dev->ethtool_ops = hds ? &dnic_ethtool_ops : &dnic_nohds_ethtool_ops;
	dev->stat_ops = &dnic_stat_ops;
	dev->queue_mgmt_ops = &dnic_queue_mgmt_ops;
	dev->netmem_tx = NETMEM_TX_DMA;
	netdev_lockdep_set_classes(dev);
	return dev;
}

/* The platform device @pdev_id, registered on first use (see dnic_pdevs). */
static struct platform_device *dnic_pdev_get(u32 pdev_id)
{
	struct platform_device_info info = {
		.name = DNIC_DRV_NAME,
		.id = pdev_id,
		.dma_mask = DMA_BIT_MASK(64),
	};
	struct platform_device *pdev = xa_load(&dnic_pdevs, pdev_id);
	int err;

	if (pdev)
		return pdev;
	pdev = platform_device_register_full(&info);
	if (IS_ERR(pdev))
		return pdev;
	err = xa_err(xa_store(&dnic_pdevs, pdev_id, pdev, GFP_KERNEL));
	if (err) {
		platform_device_unregister(pdev);
		return ERR_PTR(err);
	}
	return pdev;
}

/* At unload: no binding may be left (page-pool-get lists no detached pool
 * with a dma-buf), see dnic_pdevs.
 */
static void dnic_pdevs_unregister(void)
{
	struct platform_device *pdev;
	unsigned long idx;

	xa_for_each(&dnic_pdevs, idx, pdev)
		platform_device_unregister(pdev);
	xa_destroy(&dnic_pdevs);
}

/* Frees the pair's netdevs (unregistered already); its devices stay. */
static void dnic_pair_free(struct dnic_pair *pair)
{
	int side;

	for (side = 0; side < 2; side++) {
		if (pair->side[side]) {
			struct net_device *dev = pair->side[side]->dev;

			dnic_priv_free(pair->side[side]);
			free_netdev(dev);
		}
	}
	kfree(pair);
}

/* Called with dnic_pairs_lock held. */
static int dnic_pair_create(u32 id, unsigned int nq, bool hds)
{
	struct dnic_pair *pair;
	int side, err;

	list_for_each_entry(pair, &dnic_pairs, list)
		if (pair->id == id)
			return -EEXIST;
	if (!nq || nq > DNIC_MAX_QUEUES || id > 9999)
		return -EINVAL;

	pair = kzalloc(sizeof(*pair), GFP_KERNEL);
	if (!pair)
		return -ENOMEM;
	pair->id = id;
	for (side = 0; side < 2; side++) {
		struct net_device *dev;

		pair->pdev[side] = dnic_pdev_get(id * 2 + side);
		if (IS_ERR(pair->pdev[side])) {
			err = PTR_ERR(pair->pdev[side]);
			pair->pdev[side] = NULL;
			goto err_free;
		}
		dev = dnic_alloc(pair, side, nq, hds);
		if (!dev) {
			err = -ENOMEM;
			goto err_free;
		}
		pair->side[side] = netdev_priv(dev);
	}

	rtnl_lock();
	err = register_netdevice(pair->side[0]->dev);
	if (err)
		goto err_unlock;
	err = register_netdevice(pair->side[1]->dev);
	if (err) {
		unregister_netdevice(pair->side[0]->dev);
		goto err_unlock;
	}
	rcu_assign_pointer(pair->side[0]->peer, pair->side[1]);
	rcu_assign_pointer(pair->side[1]->peer, pair->side[0]);
	rtnl_unlock();

	for (side = 0; side < 2; side++) {
		struct dnic_priv *priv = pair->side[side];

		priv->ddir = debugfs_create_dir(priv->dev->name, dnic_ddir);
		debugfs_create_file("stats", 0400, priv->ddir, priv,
				    &dnic_stats_fops);
		debugfs_create_u32("fault_linear_bytes", 0600, priv->ddir,
				   &priv->fault_linear_bytes);
		debugfs_create_file("fault", 0600, priv->ddir, priv,
				    &dnic_fault_fops);
	}
	list_add_tail(&pair->list, &dnic_pairs);
	return 0;

err_unlock:
	rtnl_unlock();
	/* Only a registered netdev is freed by unregister; none is here. */
	rcu_barrier();
err_free:
	dnic_pair_free(pair);
	return err;
}

/* Called with dnic_pairs_lock held. */
static void dnic_pair_destroy(struct dnic_pair *pair)
{
	int side;

	list_del(&pair->list);
	for (side = 0; side < 2; side++)
		debugfs_remove_recursive(pair->side[side]->ddir);
	rtnl_lock();
	RCU_INIT_POINTER(pair->side[0]->peer, NULL);
	RCU_INIT_POINTER(pair->side[1]->peer, NULL);
	unregister_netdevice(pair->side[0]->dev);
	unregister_netdevice(pair->side[1]->dev);
	rtnl_unlock();
	/* kfree_rcu() of classifiers in flight must finish first. */
	rcu_barrier();
	dnic_pair_free(pair);
}

static ssize_t dnic_new_pair_write(struct file *file, const char __user *ubuf,
				   size_t count, loff_t *ppos)
{
	unsigned int id, nq = queues;
	char buf[64], flag[16] = "";
	bool hds = true;
	int n, err;

	if (count >= sizeof(buf))
		return -EINVAL;
	if (copy_from_user(buf, ubuf, count))
		return -EFAULT;
	buf[count] = '\0';
	n = sscanf(buf, "%u %u %15s", &id, &nq, flag);
	if (n < 1)
		return -EINVAL;
	if (n == 3) {
		if (strcmp(flag, "nohds"))
			return -EINVAL;
		hds = false;
	}
	mutex_lock(&dnic_pairs_lock);
	err = dnic_pair_create(id, nq, hds);
	mutex_unlock(&dnic_pairs_lock);
	return err ? err : count;
}

static ssize_t dnic_del_pair_write(struct file *file, const char __user *ubuf,
				   size_t count, loff_t *ppos)
{
	struct dnic_pair *pair;
	unsigned int id;
	int err = -ENOENT;

	err = kstrtouint_from_user(ubuf, count, 10, &id);
	if (err)
		return err;
	err = -ENOENT;
	mutex_lock(&dnic_pairs_lock);
	list_for_each_entry(pair, &dnic_pairs, list) {
		if (pair->id == id) {
			dnic_pair_destroy(pair);
			err = 0;
			break;
		}
	}
	mutex_unlock(&dnic_pairs_lock);
	return err ? err : count;
}

static const struct file_operations dnic_new_pair_fops = {
	.open = simple_open,
	.write = dnic_new_pair_write,
	.owner = THIS_MODULE,
};

static const struct file_operations dnic_del_pair_fops = {
	.open = simple_open,
	.write = dnic_del_pair_write,
	.owner = THIS_MODULE,
};

static void dnic_destroy_all(void)
{
	struct dnic_pair *pair, *tmp;

	mutex_lock(&dnic_pairs_lock);
	list_for_each_entry_safe(pair, tmp, &dnic_pairs, list)
		dnic_pair_destroy(pair);
	mutex_unlock(&dnic_pairs_lock);
}

static int __init dnic_init(void)
{
	unsigned int i;
	int err = 0;

	if (!queues || queues > DNIC_MAX_QUEUES)
		return -EINVAL;
	dnic_ddir = debugfs_create_dir(DNIC_DRV_NAME, NULL);
	debugfs_create_file("new_pair", 0200, dnic_ddir, NULL,
			    &dnic_new_pair_fops);
	debugfs_create_file("del_pair", 0200, dnic_ddir, NULL,
			    &dnic_del_pair_fops);

	mutex_lock(&dnic_pairs_lock);
	for (i = 0; i < pairs && !err; i++)
		err = dnic_pair_create(i, queues, true);
	mutex_unlock(&dnic_pairs_lock);
	if (err) {
		dnic_destroy_all();
		dnic_pdevs_unregister();
		debugfs_remove_recursive(dnic_ddir);
	}
	return err;
}

static void __exit dnic_exit(void)
{
	debugfs_remove_recursive(dnic_ddir);
	dnic_destroy_all();
	dnic_pdevs_unregister();
}

module_init(dnic_init);
module_exit(dnic_exit);
MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("Software devmem-capable NIC pairs for ncdevmem-rs tests");
