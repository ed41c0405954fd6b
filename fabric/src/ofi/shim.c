/* fabcoll's shim: linkable symbols for libfabric's static-inline calls (see shim.h). */
#include "shim.h"

const uint32_t FABCOLL_FI_VERSION_1_17 = FI_VERSION(1, 17);
const uint64_t FABCOLL_FI_ADDR_UNSPEC = FI_ADDR_UNSPEC;
const uint64_t FABCOLL_FI_KEY_NOTAVAIL = FI_KEY_NOTAVAIL;

struct fi_info *fabcoll_fi_allocinfo(void) { return fi_allocinfo(); }
int fabcoll_fi_close(struct fid *fid) { return fi_close(fid); }
int fabcoll_fi_domain(struct fid_fabric *fabric, struct fi_info *info, struct fid_domain **domain, void *context)
{
	return fi_domain(fabric, info, domain, context);
}
int fabcoll_fi_cq_open(struct fid_domain *domain, struct fi_cq_attr *attr, struct fid_cq **cq, void *context)
{
	return fi_cq_open(domain, attr, cq, context);
}
int fabcoll_fi_av_open(struct fid_domain *domain, struct fi_av_attr *attr, struct fid_av **av, void *context)
{
	return fi_av_open(domain, attr, av, context);
}
int fabcoll_fi_av_insert(struct fid_av *av, const void *addr, size_t count, fi_addr_t *fi_addr, uint64_t flags,
			 void *context)
{
	return fi_av_insert(av, addr, count, fi_addr, flags, context);
}
int fabcoll_fi_cntr_open(struct fid_domain *domain, struct fi_cntr_attr *attr, struct fid_cntr **cntr,
			 void *context)
{
	return fi_cntr_open(domain, attr, cntr, context);
}
uint64_t fabcoll_fi_cntr_read(struct fid_cntr *cntr) { return fi_cntr_read(cntr); }
int fabcoll_fi_endpoint(struct fid_domain *domain, struct fi_info *info, struct fid_ep **ep, void *context)
{
	return fi_endpoint(domain, info, ep, context);
}
int fabcoll_fi_ep_bind(struct fid_ep *ep, struct fid *bfid, uint64_t flags) { return fi_ep_bind(ep, bfid, flags); }
int fabcoll_fi_enable(struct fid_ep *ep) { return fi_enable(ep); }
int fabcoll_fi_getname(struct fid *fid, void *addr, size_t *addrlen) { return fi_getname(fid, addr, addrlen); }
int fabcoll_fi_mr_reg(struct fid_domain *domain, const void *buf, size_t len, uint64_t acs, uint64_t offset,
		      uint64_t requested_key, uint64_t flags, struct fid_mr **mr, void *context)
{
	return fi_mr_reg(domain, buf, len, acs, offset, requested_key, flags, mr, context);
}
void *fabcoll_fi_mr_desc(struct fid_mr *mr) { return fi_mr_desc(mr); }
uint64_t fabcoll_fi_mr_key(struct fid_mr *mr) { return fi_mr_key(mr); }
int fabcoll_fi_mr_bind(struct fid_mr *mr, struct fid *bfid, uint64_t flags) { return fi_mr_bind(mr, bfid, flags); }
int fabcoll_fi_mr_enable(struct fid_mr *mr) { return fi_mr_enable(mr); }
ssize_t fabcoll_fi_write(struct fid_ep *ep, const void *buf, size_t len, void *desc, fi_addr_t dest_addr,
			 uint64_t addr, uint64_t key, void *context)
{
	return fi_write(ep, buf, len, desc, dest_addr, addr, key, context);
}
ssize_t fabcoll_fi_writedata(struct fid_ep *ep, const void *buf, size_t len, void *desc, uint64_t data,
			     fi_addr_t dest_addr, uint64_t addr, uint64_t key, void *context)
{
	return fi_writedata(ep, buf, len, desc, data, dest_addr, addr, key, context);
}
ssize_t fabcoll_fi_inject_writedata(struct fid_ep *ep, const void *buf, size_t len, uint64_t data, fi_addr_t dest_addr,
				    uint64_t addr, uint64_t key)
{
	return fi_inject_writedata(ep, buf, len, data, dest_addr, addr, key);
}
ssize_t fabcoll_fi_inject_write(struct fid_ep *ep, const void *buf, size_t len, fi_addr_t dest_addr, uint64_t addr,
				uint64_t key)
{
	return fi_inject_write(ep, buf, len, dest_addr, addr, key);
}
ssize_t fabcoll_fi_tsend(struct fid_ep *ep, const void *buf, size_t len, void *desc, fi_addr_t dest_addr,
			 uint64_t tag, void *context)
{
	return fi_tsend(ep, buf, len, desc, dest_addr, tag, context);
}
ssize_t fabcoll_fi_trecv(struct fid_ep *ep, void *buf, size_t len, void *desc, fi_addr_t src_addr, uint64_t tag,
			 uint64_t ignore, void *context)
{
	return fi_trecv(ep, buf, len, desc, src_addr, tag, ignore, context);
}
ssize_t fabcoll_fi_cq_read(struct fid_cq *cq, void *buf, size_t count) { return fi_cq_read(cq, buf, count); }
ssize_t fabcoll_fi_cq_readerr(struct fid_cq *cq, struct fi_cq_err_entry *buf, uint64_t flags)
{
	return fi_cq_readerr(cq, buf, flags);
}
const char *fabcoll_fi_cq_strerror(struct fid_cq *cq, int prov_errno, const void *err_data, char *buf, size_t len)
{
	return fi_cq_strerror(cq, prov_errno, err_data, buf, len);
}
