#include "transport/ucx/am_mailbox.hpp"

#include <cstring>

#include "runtime/error.hpp"

namespace troupe::ucx {

namespace {

void scatter(const std::vector<ucp_dt_iov_t>& dst, const void* data) {
  const auto* src = static_cast<const uint8_t*>(data);
  for (const ucp_dt_iov_t& seg : dst) {
    if (seg.length > 0) std::memcpy(seg.buffer, src, seg.length);
    src += seg.length;
  }
}

}  // namespace

Mailbox::Mailbox(Worker& worker, unsigned am_id, bool pull_early)
    : worker_(worker), am_id_(am_id), pull_early_(pull_early) {
  ucp_am_handler_param_t hp{};
  hp.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_FLAGS |
                  UCP_AM_HANDLER_PARAM_FIELD_CB | UCP_AM_HANDLER_PARAM_FIELD_ARG;
  hp.id = am_id;
  hp.flags = UCP_AM_FLAG_WHOLE_MSG;
  hp.cb = &Mailbox::on_message;
  hp.arg = this;
  const ucs_status_t st = ucp_worker_set_am_recv_handler(worker.get(), &hp);
  if (st != UCS_OK) fail("ucx: cannot register active message {}: {}", am_id, status_text(st));
}

Mailbox::~Mailbox() {
  ucp_am_handler_param_t hp{};
  hp.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB;
  hp.id = am_id_;
  hp.cb = nullptr;
  ucp_worker_set_am_recv_handler(worker_.get(), &hp);
  for (auto& [key, p] : posted_)
    if (p.req != nullptr) {
      ucp_request_cancel(worker_.get(), p.req);
      ucp_request_free(p.req);
    }
  for (auto& [key, k] : kept_) {
    if (k.req != nullptr) {
      ucp_request_cancel(worker_.get(), k.req);
      ucp_request_free(k.req);
    } else if (k.desc != nullptr) {
      ucp_am_data_release(worker_.get(), k.desc);
    }
  }
}

void Mailbox::deliver(Posted& p, void* data, size_t length, bool rndv, bool release_desc) {
  p.status.arrived_bytes = length;
  if (length != p.bytes) {
    p.status.state = State::failed;
    if (release_desc) ucp_am_data_release(worker_.get(), data);
    return;
  }
  if (!rndv) {
    scatter(p.dst, data);
    if (release_desc) ucp_am_data_release(worker_.get(), data);
    p.status.state = State::done;
    return;
  }
  ucp_request_param_t rp{};
  rp.op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE;
  void* buffer = nullptr;
  size_t count = 0;
  if (p.dst.size() == 1) {
    rp.datatype = ucp_dt_make_contig(1);
    buffer = p.dst[0].buffer;
    count = p.dst[0].length;
  } else {
    rp.datatype = ucp_dt_make_iov();
    buffer = p.dst.data();
    count = p.dst.size();
  }
  void* req = ucp_am_recv_data_nbx(worker_.get(), data, buffer, count, &rp);
  if (req == nullptr) {
    p.status.state = State::done;
  } else if (UCS_PTR_IS_ERR(req)) {
    p.status.state = State::failed;
    p.status.ucs = UCS_PTR_STATUS(req);
  } else {
    p.status.state = State::receiving;
    p.req = req;
  }
}

ucs_status_t Mailbox::on_message(void* arg, const void* header, size_t header_length, void* data,
                                 size_t length, const ucp_am_recv_param_t* param) {
  auto* self = static_cast<Mailbox*>(arg);
  if (header_length != sizeof(MailHeader)) {
    if (self->protocol_error_.empty())
      self->protocol_error_ = fmt::format("a message with a {}-byte header on active message {}",
                                          header_length, self->am_id_);
    return UCS_OK;  // dropped (a rendezvous one completes its sender without data)
  }
  MailHeader h;
  std::memcpy(&h, header, sizeof h);
  const Key key{h.source, h.key};
  const bool rndv = (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0;
  ++(rndv ? self->stats_.rndv : self->stats_.eager);
  auto it = self->posted_.find(key);
  if (it != self->posted_.end() && it->second.status.state == State::waiting) {
    self->deliver(it->second, data, length, rndv, false);
    return UCS_OK;
  }
  if (it != self->posted_.end() || self->kept_.count(key) != 0) {
    if (self->protocol_error_.empty())
      self->protocol_error_ = fmt::format("source {} sent key {} twice on active message {}",
                                          h.source, h.key, self->am_id_);
    return UCS_OK;
  }
  Kept k;
  k.length = length;
  k.rndv = rndv;
  if (self->pull_early_ && rndv) {
    Kept& stored = self->kept_.emplace(key, std::move(k)).first->second;
    stored.copy.resize(length);
    ucp_request_param_t rp{};
    rp.op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE;
    rp.datatype = ucp_dt_make_contig(1);
    void* req = ucp_am_recv_data_nbx(self->worker_.get(), data, stored.copy.data(), length, &rp);
    if (UCS_PTR_IS_ERR(req)) {
      stored.copy.clear();
      stored.pull_failed = UCS_PTR_STATUS(req);  // take_ready reports it
    } else {
      stored.req = req;
    }
    return UCS_OK;
  }
  if (!self->pull_early_ && (rndv || (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_DATA) != 0)) {
    k.desc = data;
    self->kept_.emplace(key, std::move(k));
    return UCS_INPROGRESS;  // UCX keeps the data until ucp_am_data_release / recv_data
  }
  const auto* b = static_cast<const uint8_t*>(data);
  k.copy.assign(b, b + length);
  self->kept_.emplace(key, std::move(k));
  return UCS_OK;
}

void Mailbox::post(uint32_t source, uint64_t key, void* dst, size_t bytes) {
  post(source, key, std::vector<ucp_dt_iov_t>{ucp_dt_iov_t{dst, bytes}});
}

void Mailbox::post(uint32_t source, uint64_t key, std::vector<ucp_dt_iov_t> dst) {
  if (pull_early_) fail("ucx mailbox: post() on a pull_early mailbox (use take_ready)");
  const Key k{source, key};
  auto [it, inserted] = posted_.try_emplace(k);
  if (!inserted) fail("ucx mailbox: receive (source {}, key {}) posted twice", source, key);
  Posted& p = it->second;
  for (const ucp_dt_iov_t& seg : dst) p.bytes += seg.length;
  p.dst = std::move(dst);
  auto kept = kept_.find(k);
  if (kept == kept_.end()) return;
  Kept m = std::move(kept->second);
  kept_.erase(kept);
  if (m.desc != nullptr)
    deliver(p, m.desc, m.length, m.rndv, !m.rndv || m.length != p.bytes);
  else
    deliver(p, m.copy.data(), m.length, false, false);
}

Mailbox::Status Mailbox::status(uint32_t source, uint64_t key) {
  auto it = posted_.find(Key{source, key});
  if (it == posted_.end())
    fail("ucx mailbox: no receive posted for (source {}, key {})", source, key);
  Posted& p = it->second;
  if (p.status.state == State::receiving) {
    const ucs_status_t st = ucp_request_check_status(p.req);
    if (st != UCS_INPROGRESS) {
      ucp_request_free(p.req);
      p.req = nullptr;
      p.status.state = st == UCS_OK ? State::done : State::failed;
      p.status.ucs = st;
    }
  }
  return p.status;
}

void Mailbox::forget(uint32_t source, uint64_t key) {
  auto it = posted_.find(Key{source, key});
  if (it == posted_.end()) return;
  if (it->second.req != nullptr) {
    ucp_request_cancel(worker_.get(), it->second.req);
    ucp_request_free(it->second.req);
  }
  posted_.erase(it);
}

std::vector<Mailbox::Arrived> Mailbox::take_ready() {
  std::vector<Arrived> out;
  for (auto it = kept_.begin(); it != kept_.end();) {
    Kept& k = it->second;
    ucs_status_t st = k.pull_failed;
    if (k.req != nullptr) {
      st = ucp_request_check_status(k.req);
      if (st == UCS_INPROGRESS) {
        ++it;
        continue;
      }
      ucp_request_free(k.req);
      k.req = nullptr;
    }
    out.push_back(Arrived{it->first.first, it->first.second, st,
                          st == UCS_OK ? std::move(k.copy) : std::vector<uint8_t>{}});
    it = kept_.erase(it);
  }
  return out;
}

bool Mailbox::has_kept(uint32_t source, uint64_t key) const {
  return kept_.count(Key{source, key}) != 0;
}

void Mailbox::send(Pending& pending, Endpoint& ep, unsigned am_id, const MailHeader& h,
                   const void* data, size_t bytes, std::string_view what, uint32_t flags) {
  ep.throw_if_failed(what);
  ucp_request_param_t rp{};
  rp.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS | UCP_OP_ATTR_FIELD_DATATYPE;
  rp.flags = flags;
  rp.datatype = ucp_dt_make_contig(1);
  const void* hdr = pending.keep(&h, sizeof h);
  pending.add(ucp_am_send_nbx(ep.get(), am_id, hdr, sizeof h, data, bytes, &rp), &ep, what);
}

void Mailbox::send(Pending& pending, Endpoint& ep, unsigned am_id, const MailHeader& h,
                   const std::vector<ucp_dt_iov_t>& segments, std::string_view what,
                   uint32_t flags) {
  if (segments.size() == 1) {
    send(pending, ep, am_id, h, segments[0].buffer, segments[0].length, what, flags);
    return;
  }
  ep.throw_if_failed(what);
  ucp_request_param_t rp{};
  rp.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS | UCP_OP_ATTR_FIELD_DATATYPE;
  rp.flags = flags;
  rp.datatype = ucp_dt_make_iov();
  const void* hdr = pending.keep(&h, sizeof h);
  const void* iov = pending.keep(segments.data(), segments.size() * sizeof(ucp_dt_iov_t));
  pending.add(ucp_am_send_nbx(ep.get(), am_id, hdr, sizeof h, iov, segments.size(), &rp), &ep,
              what);
}

}  // namespace troupe::ucx
