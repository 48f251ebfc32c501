// Command gin shows httplimit in a gin application. httplimit's middleware has the
// net/http shape, func(http.Handler) http.Handler; Limit adapts it to a gin.HandlerFunc in
// a few lines. This directory is its own Go module, so gin never enters sluice's go.mod.
//
//	cd examples/gin && go run . &
//	for i in 1 2 3 4; do curl -s -o /dev/null -w '%{http_code}\n' localhost:8080/search?q=x; done   # 200 200 200 429
package main

import (
	"log"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/memory"
)

// Limit runs mw in front of the rest of the gin chain: a request it denies gets mw's
// response (429 or 503 with the RateLimit headers) and the chain is aborted.
func Limit(mw *httplimit.Middleware) gin.HandlerFunc {
	return func(c *gin.Context) {
		passed := false
		mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			passed = true
			c.Request = r
			c.Next()
		})).ServeHTTP(c.Writer, c.Request)
		if !passed {
			c.Abort()
		}
	}
}

// newRouter builds the demo application on store.
func newRouter(store sluice.Limiter) (*gin.Engine, error) {
	mw, err := httplimit.New(httplimit.Config{
		Limiter: store,
		Policies: []httplimit.Policy{
			{Name: "per-ip", Limit: sluice.PerSecond(10)},
			// Routes are matched as http.ServeMux patterns, independently of gin's router.
			{Name: "search", Route: "GET /search", Limit: sluice.PerMinute(3)},
		},
	})
	if err != nil {
		return nil, err
	}
	r := gin.New()
	r.Use(gin.Recovery(), Limit(mw))
	r.GET("/search", func(c *gin.Context) {
		c.JSON(http.StatusOK, gin.H{"query": c.Query("q"), "results": []string{}})
	})
	r.GET("/hello/:name", func(c *gin.Context) {
		c.String(http.StatusOK, "hello %s\n", c.Param("name"))
	})
	return r, nil
}

func main() {
	store := memory.New()
	defer store.Close()
	r, err := newRouter(store)
	if err != nil {
		log.Fatal(err)
	}
	log.Fatal(r.Run("localhost:8080"))
}
