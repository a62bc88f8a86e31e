// MoveMatching: moves the elements of one sequence container that match a predicate to the end
// of another, keeping the order of both (the aborted requests of a scheduler's queues).
#ifndef SPARSESERVE_COMMON_CORE_MOVE_MATCHING_H_
#define SPARSESERVE_COMMON_CORE_MOVE_MATCHING_H_

#include <utility>

namespace sparseserve::core {

// Moves every element of `from` for which `match(element)` is true to the end of `to`, in order,
// and erases it from `from`. `From` is a sequence container with erase(iterator) (std::deque,
// std::vector, std::list), `To` one with push_back.
template <typename From, typename To, typename Match>
void MoveMatching(From& from, To& to, Match match) {
  for (auto it = from.begin(); it != from.end();) {
    if (match(*it)) {
      to.push_back(std::move(*it));
      it = from.erase(it);
    } else {
      ++it;
    }
  }
}

}  // namespace sparseserve::core

#endif  // SPARSESERVE_COMMON_CORE_MOVE_MATCHING_H_
