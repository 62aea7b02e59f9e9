// The state behind the Responses API's `previous_response_id` and
// `item_reference`: responses created with `store` true (OpenAI's default)
// are kept in memory, bounded by count and by bytes, oldest evicted first,
// and lost on restart (a client that needs more sends the whole input with
// `store: false`, as OpenCode and the AI SDK can). One mutex guards it: HTTP
// threads put, get and delete concurrently; the engine never touches it.
#pragma once

#include <cstddef>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include "server/api_error.h"

namespace ms::server {

struct StoredResponse {
  Json response;  // the Response object as returned (GET /v1/responses/{id})
  // The conversation the next turn continues: the input messages (earlier
  // turns included, instructions excluded) and this response's output, as
  // chat messages for the template.
  Json messages = Json::array();
  Json items = Json::object();  // output item id -> the item (for item_reference)
};

class ResponseStore {
 public:
  ResponseStore(size_t max_entries = 1024, size_t max_bytes = size_t(64) << 20)
      : max_entries_(max_entries), max_bytes_(max_bytes) {}

  // Stores (replacing an entry with the same id); a response larger than the
  // whole budget is not kept.
  void put(const std::string& id, StoredResponse r);
  std::shared_ptr<const StoredResponse> get(const std::string& id) const;
  // The item with this id in any stored response.
  std::optional<Json> item(const std::string& item_id) const;
  bool erase(const std::string& id);
  size_t size() const;
  size_t bytes() const;

 private:
  struct Entry {
    std::shared_ptr<const StoredResponse> value;
    size_t bytes = 0;
    std::list<std::string>::iterator order;
  };
  void erase_locked(const std::string& id);

  const size_t max_entries_, max_bytes_;
  mutable std::mutex mu_;  // guards everything below
  std::unordered_map<std::string, Entry> entries_;
  std::unordered_map<std::string, std::string> item_owner_;  // item id -> response id
  std::list<std::string> order_;                             // oldest first
  size_t bytes_ = 0;
};

}  // namespace ms::server
