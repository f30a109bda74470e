//! (placeholder: TCP sockets, devmem recvmsg, SO_DEVMEM_DONTNEED)
