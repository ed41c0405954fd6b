/* fabcoll's shim over libfabric's static-inline calls (which have no linkable symbol).
 * Each fabcoll_X(args) is exactly X(args); bindgen reads this header for types and constants. */
#ifndef FABCOLL_OFI_SHIM_H
#define FABCOLL_OFI_SHIM_H

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>

/* Function-like macros bindgen cannot evaluate. */
extern const uint32_t FABCOLL_FI_VERSION_1_17;
extern const uint64_t FABCOLL_FI_ADDR_UNSPEC;
extern const uint64_t FABCOLL_FI_KEY_NOTAVAIL;

struct fi_info *fabcoll_fi_allocinfo(void);
int fabcoll_fi_close(struct fid *fid);
int fabcoll_fi_domain(struct fid_fabric *fabric, struct fi_info *info, struct fid_domain **domain, void *context);
int fabcoll_fi_cq_open(struct fid_domain *domain, struct fi_cq_attr *attr, struct fid_cq **cq, void *context);
int fabcoll_fi_av_open(struct fid_domain *domain, struct fi_av_attr *attr, struct fid_av **av, void *context);
int fabcoll_fi_av_insert(struct fid_av *av, const void *addr, size_t count, fi_addr_t *fi_addr, uint64_t flags,
			 void *context);
int fabcoll_fi_cntr_open(struct fid_domain *domain, struct fi_cntr_attr *attr, struct fid_cntr **cntr,
			 void *context);
uint64_t fabcoll_fi_cntr_read(struct fid_cntr *cntr);
int fabcoll_fi_endpoint(struct fid_domain *domain, struct fi_info *info, struct fid_ep **ep, void *context);
int fabcoll_fi_ep_bind(struct fid_ep *ep, struct fid *bfid, uint64_t flags);
int fabcoll_fi_enable(struct fid_ep *ep);
int fabcoll_fi_getname(struct fid *fid, void *addr, size_t *addrlen);
int fabcoll_fi_mr_reg(struct fid_domain *domain, const void *buf, size_t len, uint64_t acs, uint64_t offset,
		      uint64_t requested_key, uint64_t flags, struct fid_mr **mr, void *context);
void *fabcoll_fi_mr_desc(struct fid_mr *mr);
uint64_t fabcoll_fi_mr_key(struct fid_mr *mr);
int fabcoll_fi_mr_bind(struct fid_mr *mr, struct fid *bfid, uint64_t flags);
int fabcoll_fi_mr_enable(struct fid_mr *mr);
ssize_t fabcoll_fi_write(struct fid_ep *ep, const void *buf, size_t len, void *desc, fi_addr_t dest_addr,
			 uint64_t addr, uint64_t key, void *context);
ssize_t fabcoll_fi_writedata(struct fid_ep *ep, const void *buf, size_t len, void *desc, uint64_t data,
			     fi_addr_t dest_addr, uint64_t addr, uint64_t key, void *context);
ssize_t fabcoll_fi_inject_writedata(struct fid_ep *ep, const void *buf, size_t len, uint64_t data, fi_addr_t dest_addr,
				    uint64_t addr, uint64_t key);
ssize_t fabcoll_fi_inject_write(struct fid_ep *ep, const void *buf, size_t len, fi_addr_t dest_addr, uint64_t addr,
				uint64_t key);
ssize_t fabcoll_fi_tsend(struct fid_ep *ep, const void *buf, size_t len, void *desc, fi_addr_t dest_addr,
			 uint64_t tag, void *context);
ssize_t fabcoll_fi_trecv(struct fid_ep *ep, void *buf, size_t len, void *desc, fi_addr_t src_addr, uint64_t tag,
			 uint64_t ignore, void *context);
ssize_t fabcoll_fi_cq_read(struct fid_cq *cq, void *buf, size_t count);
ssize_t fabcoll_fi_cq_readerr(struct fid_cq *cq, struct fi_cq_err_entry *buf, uint64_t flags);
const char *fabcoll_fi_cq_strerror(struct fid_cq *cq, int prov_errno, const void *err_data, char *buf, size_t len);

#endif
