#include "core/stand_in.h"

#include "common/error.h"
#include "reduce/reduce.h"

namespace prioccl::detail {

std::shared_ptr<OpState> makeStandIn(const Decision& d, int rank, int nranks) {
  using Kind = OpState::Kind;
  auto op = std::make_shared<OpState>();
  op->kind = static_cast<Kind>(d.a.kind);
  op->count = d.a.count;
  op->dtype = static_cast<priocclDataType_t>(d.a.dtype);
  op->op = static_cast<priocclRedOp_t>(d.a.op);
  op->root = d.a.root;
  op->layout = d.a.layout;
  op->named = true;
  // Messages name it by what this rank knows: the key's hash.
  op->key = concat("(key hash ", std::hex, d.key, std::dec, ", answered for this joined rank)");
  const size_t elem = reduce::dtypeSize(op->dtype);
  if (elem == 0 || !reduce::isValidOp(op->op))
    fail(priocclRemoteError, "a decision for this joined rank names datatype ", d.a.dtype,
         " and op ", d.a.op, ": a corrupted or foreign decision");
  switch (op->kind) {
    case Kind::kAllReduce:  // in place: the identity goes in, the others' result comes out
      op->ownBuffer.resize(op->count * elem);
      op->send = op->recv = op->ownBuffer.data();
      break;
    case Kind::kReduce:  // sends the identity; the root (never this rank) receives
      op->ownBuffer.resize(op->count * elem);
      op->send = op->ownBuffer.data();
      break;
    case Kind::kReduceScatter:  // in place: this rank's block of the identity-filled blocks
      op->ownBuffer.resize(op->count * elem * static_cast<size_t>(nranks));
      op->send = op->ownBuffer.data();
      op->recv = op->ownBuffer.data() + op->count * elem * static_cast<size_t>(rank);
      break;
    case Kind::kBroadcast:  // receives only (the root never joined)
      op->ownBuffer.resize(op->count * elem);
      op->recv = op->ownBuffer.data();
      return op;
    case Kind::kBarrier:
      return op;
    default:  // the coordinator answers no other kind for a joined rank
      fail(priocclRemoteError, "the coordinator answered a ", static_cast<int>(d.a.kind),
           " op for this joined rank: a corrupted or foreign decision");
  }
  reduce::fillIdentity(op->ownBuffer.data(), op->ownBuffer.size() / elem, op->dtype, op->op);
  return op;
}

}  // namespace prioccl::detail
