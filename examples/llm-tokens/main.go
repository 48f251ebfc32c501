// Command llm-tokens limits an LLM API by tokens per minute, where a call's cost is known
// only when its response ends: the prompt's tokens are estimated and spent up front, and
// the completion's are charged when the response has been streamed.
//
//	go run ./examples/llm-tokens            # a demo: six calls of one user, then exits
//	go run ./examples/llm-tokens -serve     # serve on localhost:8080, then:
//	curl -i -H 'X-User: alice' -d 'tell me a story' localhost:8080/v1/complete
//
// Each user may use 2,000 tokens per minute (a token bucket, so the allowance refills
// continuously). A call is admitted if its estimate, the prompt's tokens, fits; when the
// completion is done, the reservation is settled at the call's real cost, prompt plus
// completion. An expensive completion therefore denies the user's next calls until the
// bucket refills: a burst of expensive calls cannot all pass before any is counted.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/stack"
)

// tpm is the limit: 2,000 tokens per minute per user.
var tpm = sluice.Limit{Algorithm: sluice.TokenBucket, Rate: 2000, Period: time.Minute}

// settleWithin bounds a call: a reservation not settled by then stands at its estimate.
const settleWithin = 5 * time.Minute

// tokens estimates the tokens of a text, as a tokenizer would, roughly: 4 bytes each.
func tokens(s string) int64 { return int64(len(s)+3) / 4 }

// complete is the model: it streams a completion of the prompt and returns its tokens.
func complete(w io.Writer, prompt string, maxTokens int64) int64 {
	var n int64
	for n < maxTokens {
		word := "lorem "
		io.WriteString(w, word)
		n += tokens(word)
	}
	return n
}

// handler serves POST /v1/complete: prompt in the body, max_tokens in the query.
func handler(lim sluice.Limiter) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		user := r.Header.Get("X-User")
		body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		prompt := string(body)
		maxTokens, _ := strconv.ParseInt(r.URL.Query().Get("max_tokens"), 10, 64)
		estimate := min(tokens(prompt), tpm.MaxCost())

		var d [1]sluice.Decision
		_, err := lim.Decide(r.Context(), []sluice.Request{{
			Key: "user:" + user, Limit: tpm, N: estimate, SettleTTL: settleWithin,
		}}, d[:])
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		if !d[0].Allowed {
			w.Header().Set("Retry-After", strconv.FormatInt(int64(d[0].RetryAfter/time.Second)+1, 10))
			http.Error(w, "token budget exhausted", http.StatusTooManyRequests)
			return
		}
		used := estimate
		defer func() {
			// Settled when the response ends, even if the client went away meanwhile.
			ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), 2*time.Second)
			defer cancel()
			after, err := lim.Settle(ctx, "user:"+user, tpm, d[0].Reservation, used)
			if err != nil {
				log.Printf("settle: %v (the estimate stands)", err)
				return
			}
			log.Printf("%s: estimated %d, used %d tokens; %d left", user, estimate, used, after.Remaining)
		}()
		w.Header().Set("Content-Type", "text/plain")
		used += complete(w, prompt, maxTokens)
	})
}

func main() {
	serve := flag.Bool("serve", false, "serve on -addr instead of running the demo")
	addr := flag.String("addr", "localhost:8080", "listen address for -serve")
	flag.Parse()
	// The production stack on the in-process store; stack.Options{RedisURL: ...} shares
	// the budget between replicas.
	st, err := stack.Open(nil, stack.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()
	h := handler(st.Limiter())
	if *serve {
		log.Fatal(http.ListenAndServe(*addr, h))
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	for i, maxTokens := range []int{100, 100, 1500, 100, 100, 100} {
		req, _ := http.NewRequest("POST", fmt.Sprintf("%s/v1/complete?max_tokens=%d", srv.URL, maxTokens),
			strings.NewReader(strings.Repeat("a long prompt ", 20)))
		req.Header.Set("X-User", "alice")
		rp, err := http.DefaultClient.Do(req)
		if err != nil {
			log.Fatal(err)
		}
		io.Copy(io.Discard, rp.Body)
		rp.Body.Close()
		fmt.Printf("call %d (max_tokens %d): %s\n", i+1, maxTokens, rp.Status)
	}
}
