#include "provider/completion_channel.h"

namespace softverbs::provider {

void CompletionChannel::attach(const Cq& cq, SoftCq& soft) {
  std::lock_guard lock(cqs_mutex_);
  cqs_.emplace(&cq, &soft);
}

void CompletionChannel::detach(const Cq& cq, SoftCq& soft) {
  std::lock_guard lock(cqs_mutex_);
  cqs_.erase(&cq);
  events_.remove_if([&soft](SoftCq* pending) { return pending == &soft; });
}

void CompletionChannel::on_completion_event(Cq& cq) {
  std::lock_guard lock(cqs_mutex_);
  auto it = cqs_.find(&cq);
  if (it == cqs_.end()) return;  // the CQ is being destroyed
  events_.push(it->second);
}

Errno CompletionChannel::next_event(SoftCq*& out) {
  return events_.pop(
      out, [](SoftCq* cq) { ++cq->comp_events_delivered; },
      [this](std::atomic<uint32_t>& word, uint32_t expected) {
        return hca_->wait_serving_intake(word, expected);
      });
}

}  // namespace softverbs::provider
