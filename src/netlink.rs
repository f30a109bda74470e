//! (placeholder: generic netlink client; family files in src/netlink/)
