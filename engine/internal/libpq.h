// libpq, loaded the first time a PostgreSQL store connects (dlopen of libpq.so.5), not at
// every start: a vnflow on SQLite maps neither libpq nor the libraries it brings (GnuTLS,
// LDAP, SASL, Kerberos, p11-kit), whose loading and constructors were about a third of
// every CLI command's start. The types and constants come from libpq-fe.h as before; the
// calls go through pq(), the table of its functions.
#pragma once

#include <string>

#include <libpq-fe.h>

namespace engine::internal {

// clang-format off
#define VNFLOW_PQ_FUNCTIONS(X) \
  X(PQclear) \
  X(PQcmdTuples) \
  X(PQconnectdbParams) \
  X(PQconsumeInput) \
  X(PQerrorMessage) \
  X(PQexec) \
  X(PQexecPrepared) \
  X(PQfinish) \
  X(PQfreemem) \
  X(PQgetisnull) \
  X(PQgetlength) \
  X(PQgetvalue) \
  X(PQnotifies) \
  X(PQntuples) \
  X(PQprepare) \
  X(PQresultErrorField) \
  X(PQresultErrorMessage) \
  X(PQresultStatus) \
  X(PQsetNoticeProcessor) \
  X(PQsocket) \
  X(PQstatus) \
  X(PQtransactionStatus)
// clang-format on

struct PqApi {
#define VNFLOW_PQ_MEMBER(f) decltype(&::f) f = nullptr;
  VNFLOW_PQ_FUNCTIONS(VNFLOW_PQ_MEMBER)
#undef VNFLOW_PQ_MEMBER
};

// Loads libpq once (thread-safe); "" when loaded, else why not (to prefix with what failed).
const std::string& load_libpq();
// The functions; only after load_libpq() answered "" (every connection does it first).
const PqApi& pq();

}  // namespace engine::internal
