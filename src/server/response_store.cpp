// The bounded in-memory store of Responses API responses; see response_store.h.
#include "server/response_store.h"

namespace ms::server {

void ResponseStore::put(const std::string& id, StoredResponse r) {
  const size_t bytes = r.response.dump().size() + r.messages.dump().size() + r.items.dump().size() + id.size();
  std::lock_guard<std::mutex> lock(mu_);
  erase_locked(id);
  if (bytes > max_bytes_ || max_entries_ == 0) return;
  while (!order_.empty() && (entries_.size() >= max_entries_ || bytes_ + bytes > max_bytes_)) {
    erase_locked(order_.front());
  }
  for (auto it = r.items.begin(); it != r.items.end(); ++it) item_owner_[it.key()] = id;
  order_.push_back(id);
  Entry e;
  e.value = std::make_shared<const StoredResponse>(std::move(r));
  e.bytes = bytes;
  e.order = std::prev(order_.end());
  entries_.emplace(id, std::move(e));
  bytes_ += bytes;
}

std::shared_ptr<const StoredResponse> ResponseStore::get(const std::string& id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(id);
  return it == entries_.end() ? nullptr : it->second.value;
}

std::optional<Json> ResponseStore::item(const std::string& item_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto owner = item_owner_.find(item_id);
  if (owner == item_owner_.end()) return std::nullopt;
  auto it = entries_.find(owner->second);
  if (it == entries_.end()) return std::nullopt;
  const Json& items = it->second.value->items;
  auto item = items.find(item_id);
  if (item == items.end()) return std::nullopt;
  return *item;
}

bool ResponseStore::erase(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!entries_.count(id)) return false;
  erase_locked(id);
  return true;
}

size_t ResponseStore::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_.size();
}

size_t ResponseStore::bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_;
}

void ResponseStore::erase_locked(const std::string& id) {
  auto it = entries_.find(id);
  if (it == entries_.end()) return;
  const Json& items = it->second.value->items;
  for (auto item = items.begin(); item != items.end(); ++item) {
    auto owner = item_owner_.find(item.key());
    if (owner != item_owner_.end() && owner->second == id) item_owner_.erase(owner);
  }
  bytes_ -= it->second.bytes;
  order_.erase(it->second.order);
  entries_.erase(it);
}

}  // namespace ms::server
